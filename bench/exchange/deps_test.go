package exchange_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports keeps the package's layering: the standard library and bth
// only; tests may also use goroce's stdlib-only test helpers under
// internal/ (the golden-capture TCP reader).
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	check := func(kind string, imports []string) {
		for _, imp := range imports {
			first, _, _ := strings.Cut(imp, "/")
			if kind != "package" && imp == "github.com/goroce/goroce/internal/pcaptest" {
				continue
			}
			if strings.Contains(first, ".") && imp != "github.com/goroce/goroce/bth" && imp != "github.com/goroce/goroce/bench/exchange" {
				t.Errorf("%s import %q: only the standard library and bth are allowed", kind, imp)
			}
		}
	}
	check("package", pkg.Imports)
	check("test", pkg.TestImports)
	check("external test", pkg.XTestImports)
	for _, imp := range pkg.Imports {
		if imp == "github.com/goroce/goroce/bench/exchange" {
			t.Errorf("package imports itself")
		}
	}
}
