package memreturn

import (
	"runtime"
	"testing"
)

var sink [][]byte

func TestCheckReturnsWhatABurstLeft(t *testing.T) {
	debug := func() uint64 { var m runtime.MemStats; runtime.ReadMemStats(&m); return m.HeapIdle - m.HeapReleased }
	for i := 0; i < 64; i++ {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	runtime.GC() // garbage collected, its memory free but kept by the runtime
	if Free() < 16<<20 {
		t.Fatalf("the runtime returned the burst's memory before any Check (%d bytes free): the test cannot tell Check's work from the scavenger's", Free())
	}
	if !Check(4 << 20) {
		t.Fatalf("Check with %d bytes free and a 4 MiB threshold did nothing", Free())
	}
	if f := Free(); f > 4<<20 {
		t.Errorf("after Check, %d bytes are still free and held (MemStats: %d)", f, debug())
	}
	if Check(4 << 20) {
		t.Error("a second Check returned memory again with nothing held")
	}
}
