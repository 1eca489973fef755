package pcap

import (
	"os"
	"path/filepath"
	"testing"
)

// captureFiles returns the real kernel rxe captures: the copies the wire
// package keeps in the repository, else the shared folder beside the
// checkout.
func captureFiles(t testing.TB) []string {
	t.Helper()
	for _, dir := range []string{"../../../wire/testdata/captures", "../../../../shared/captures"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
		if len(files) > 0 {
			return files
		}
	}
	t.Skip("no rxe captures: neither wire/testdata/captures nor ../shared/captures exists")
	return nil
}

// vectorFile returns a file of ../shared/vectors (never copied into the
// repository), skipping when the folder is absent.
func vectorFile(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join("../../../../shared/vectors", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("real hardware vectors not present (%v)", err)
	}
	return p
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
