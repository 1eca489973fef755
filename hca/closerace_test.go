package hca_test

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

// TestRegisterRacingClose: a Device.Close that runs after RegMR or
// CreateAH checked the device and before it added the object to its table
// (where Close's clear may not see it) makes the call fail with ErrClosed
// and leaves nothing registered: the MR used to be returned, registered on
// the closed device, its Dereg succeeding.
func TestRegisterRacingClose(t *testing.T) {
	for _, kind := range []string{"RegMR", "CreateAH"} {
		t.Run(kind, func(t *testing.T) {
			da, db := pair(t, memlink.Config{})
			gid, err := db.QueryGID(0)
			if err != nil {
				t.Fatal(err)
			}
			pd, err := da.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			restore := hca.SetRegisterHook(func() {
				if err := da.Close(); err != nil {
					t.Error(err)
				}
			})
			defer restore()
			switch kind {
			case "RegMR":
				mr, err := pd.RegMR(make([]byte, 64), hca.AccessLocalWrite)
				if !errors.Is(err, hca.ErrClosed) {
					derr := error(nil)
					if mr != nil {
						derr = mr.Dereg()
					}
					t.Fatalf("RegMR with Close in its window: MR returned %v, error %v (Dereg after Close: %v); want ErrClosed", mr != nil, err, derr)
				}
			case "CreateAH":
				ah, err := pd.CreateAH(hca.AHAttr{DGID: gid})
				if !errors.Is(err, hca.ErrClosed) {
					derr := error(nil)
					if ah != nil {
						derr = ah.Destroy()
					}
					t.Fatalf("CreateAH with Close in its window: AH returned %v, error %v (Destroy after Close: %v); want ErrClosed", ah != nil, err, derr)
				}
			}
		})
	}
}
