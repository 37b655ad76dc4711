package nodeid

import (
	"testing"
	"time"
)

func TestProvesFreshComparesServerTimesInWholeSeconds(t *testing.T) {
	marked := time.Date(2026, 11, 30, 12, 0, 44, 0, time.UTC) // a GET's Last-Modified header
	m := ClusterMarker{Bootstrap: map[int]string{0: `"e0"`}, LastModified: marked}
	rec := func(etag string, lm time.Time) Record {
		return Record{Slot: Slot{ID: 0, ETag: etag, LastModified: lm}, Lease: Lease{Writer: "boot", Instance: NodeInstance{ID: 0}, Nonce: "n", Acquirable: true}}
	}
	cases := []struct {
		name string
		rec  Record
		want bool
	}{
		{"listing with milliseconds, same second", rec(`"e0"`, marked.Add(793*time.Millisecond)), true},
		{"a second later", rec(`"e0"`, marked.Add(time.Second)), false},
		{"unknown time", rec(`"e0"`, time.Time{}), false},
		{"another ETag", rec(`"e1"`, marked), false},
	}
	for _, c := range cases {
		if got := m.provesFresh(c.rec); got != c.want {
			t.Errorf("%s: provesFresh = %v, want %v", c.name, got, c.want)
		}
	}
	held := rec(`"e0"`, marked)
	held.Lease.TaskID = "holder"
	held.Lease.Instance.Version = 1
	if m.provesFresh(held) {
		t.Error("a held lease passed for never held")
	}
	if (ClusterMarker{LastModified: marked}).provesFresh(rec(`"e0"`, marked)) {
		t.Error("a marker without bootstrap ETags (Camunda's empty one) proved something")
	}
}
