package hca_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

func TestReadMR(t *testing.T) {
	da, _ := pair(t, memlink.Config{})
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := da.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq, Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	buf := []byte("0123456789")
	mr, err := pd.RegMR(buf, hca.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4)
	if err := qp.ReadMR(mr, 6, p); err != nil || !bytes.Equal(p, []byte("6789")) {
		t.Fatalf("ReadMR(6) = %q, %v", p, err)
	}
	for _, off := range []int{-1, 7, 11} {
		if err := qp.ReadMR(mr, off, p); err == nil {
			t.Errorf("ReadMR(%d, 4 bytes) of a 10-byte MR succeeded", off)
		}
	}
	if err := qp.ReadMR(nil, 0, p); err == nil {
		t.Error("ReadMR(nil) succeeded")
	}
}
