package transport_test

import (
	"reflect"
	"testing"

	"github.com/goroce/goroce/transport"
)

// TestStatsAdd: Add sums every counter, including any added to Stats
// later (each field set to a distinct value by reflection).
func TestStatsAdd(t *testing.T) {
	var a, b transport.Stats
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		va.Field(i).SetUint(uint64(1 + i))
		vb.Field(i).SetUint(uint64(100 * (1 + i)))
	}
	a.Add(&b)
	for i := range va.NumField() {
		if got, want := va.Field(i).Uint(), uint64(101*(1+i)); got != want {
			t.Errorf("%s: %d, want %d", va.Type().Field(i).Name, got, want)
		}
	}
}
