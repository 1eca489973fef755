package bench_test

import (
	"reflect"
	"testing"

	"github.com/goroce/goroce/bench"
)

// TestTransportCounters: every field of transport.Stats has exactly one
// named counter, with its value (each field set to a distinct value).
func TestTransportCounters(t *testing.T) {
	var r bench.Report
	v := reflect.ValueOf(&r.Transport).Elem()
	want := map[uint64]string{}
	for i := range v.NumField() {
		v.Field(i).SetUint(uint64(1000 + i))
		want[uint64(1000+i)] = v.Type().Field(i).Name
	}
	names := map[string]bool{}
	for _, c := range r.TransportCounters() {
		if names[c.Name] {
			t.Errorf("counter %s twice", c.Name)
		}
		names[c.Name] = true
		if _, ok := want[c.Value]; !ok {
			t.Errorf("counter %s = %d: no field of transport.Stats", c.Name, c.Value)
		}
		delete(want, c.Value)
	}
	for _, f := range want {
		t.Errorf("transport.Stats.%s has no counter", f)
	}
}
