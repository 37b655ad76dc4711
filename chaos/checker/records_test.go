package checker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// appendRecord appends r to path as the broker does: one write of a line to
// an O_APPEND file.
func appendRecord(t *testing.T, path string, r Record) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	j, _ := json.Marshal(r)
	if _, err := f.Write(append(j, '\n')); err != nil {
		t.Fatal(err)
	}
}

// writeEvents is what a tenure's broker logs for records: one write event
// each, completed 1 ms after it began.
func writeEvents(recs ...Record) []Event {
	var evs []Event
	for _, r := range recs {
		evs = append(evs, Event{Kind: KindWrite, Node: r.Node, Version: r.Version, Task: r.Task, Seq: r.Seq,
			Begin: r.Begin, Mono: r.Begin + ms, ValidUntil: r.ValidUntil})
	}
	return evs
}

// Task a holds node 0 v1 and hands over gracefully to b (v2), whose
// directory hard-links a's records-v1.log. a is stale but still running (a
// supervisor that released before its broker was gone) and appends seq 4 to
// its own file, which is b's file too; it is killed before it logs the
// event. The record names node 0 v1 in records-v1.log, as every rule before
// this one checked, and no event tells of it: only the record's own
// evidence, checked against the tenures, shows it was written after b began.
func TestStaleAppendThroughAHardLinkIsFlagged(t *testing.T) {
	root := t.TempDir()
	a := []Record{rec(0, 1, "a", 1, 10), rec(0, 1, "a", 2, 20), rec(0, 1, "a", 3, 30)}
	writeFile(t, root, 0, 1, 1, a...)
	v2 := filepath.Join(root, "node-0", "v2")
	if err := os.MkdirAll(v2, 0o755); err != nil {
		t.Fatal(err)
	}
	aFile := filepath.Join(root, "node-0", "v1", RecordFile(1))
	if err := os.Link(aFile, filepath.Join(v2, RecordFile(1))); err != nil {
		t.Fatal(err)
	}
	b1 := rec(0, 2, "b", 1, 1010)
	writeFile(t, root, 0, 2, 2, b1)
	events := append([]Event{
		{Kind: KindStart, Node: 0, Version: 1, Task: "a", Mono: 1 * ms},
		{Kind: KindStart, Node: 0, Version: 2, Task: "b", Mono: 1000 * ms, Graceful: true},
	}, writeEvents(append(a, b1)...)...)

	data, err := ReadData(root)
	if err != nil {
		t.Fatal(err)
	}
	if vs := Check(events, data, Options{DeadlineSlack: 400 * time.Millisecond}); len(vs) != 0 {
		t.Fatalf("the clean graceful handover has violations: %v", vs)
	}

	// The stale append: its lease file still looked valid to it (deadline
	// 1600 ms), but b had started at 1000 ms.
	appendRecord(t, aFile, Record{Node: 0, Version: 1, Task: "a", Seq: 4, Begin: 1500 * ms, ValidUntil: 1600 * ms})
	data, err = ReadData(root)
	if err != nil {
		t.Fatal(err)
	}
	succ, _ := data.Dir(0, 2)
	if n := len(succ.Files[1]); n != 4 {
		t.Fatalf("the successor's hard link shows %d records of v1, want 4: the append did not land in v2", n)
	}
	vs := Check(events, data, Options{DeadlineSlack: 400 * time.Millisecond})
	if len(vs) != 1 || vs[0].Rule != RuleStaleRecord || vs[0].Node != 0 ||
		!strings.Contains(vs[0].Detail, "seq 4") || !strings.Contains(vs[0].Detail, "after task b started v2") {
		t.Fatalf("violations %v, want one %s naming a's seq 4 after b started v2", vs, RuleStaleRecord)
	}
}

// After a crash (not graceful), the successor waits out the holder's lease:
// a record whose deadline reached past the successor's start was written
// under a lease that overlapped the next tenure, even if it began before.
func TestRecordWhoseDeadlineOverlapsACrashSuccessorIsFlagged(t *testing.T) {
	events := []Event{
		{Kind: KindStart, Node: 0, Version: 1, Task: "a", Mono: 1 * ms},
		{Kind: KindStart, Node: 0, Version: 2, Task: "b", Mono: 3000 * ms},
	}
	ok := Record{Node: 0, Version: 1, Task: "a", Seq: 1, Begin: 100 * ms, ValidUntil: 2000 * ms}
	bad := Record{Node: 0, Version: 1, Task: "a", Seq: 2, Begin: 2900 * ms, ValidUntil: 3900 * ms}
	if vs := Check(events, Data{Dirs: []Dir{{Node: 0, Version: 1, Files: map[int64][]Record{1: {ok}}}}}, Options{DeadlineSlack: 400 * time.Millisecond}); len(vs) != 0 {
		t.Fatalf("a record whose deadline ended before the successor: %v", vs)
	}
	vs := Check(events, Data{Dirs: []Dir{{Node: 0, Version: 1, Files: map[int64][]Record{1: {ok, bad}}}}}, Options{DeadlineSlack: 400 * time.Millisecond})
	if got := rules(vs); got[RuleStaleRecord] != 1 || len(vs) != 1 || !strings.Contains(vs[0].Detail, "not a graceful handover") {
		t.Fatalf("violations %v, want one %s for a deadline past the successor's start", vs, RuleStaleRecord)
	}
	// Within the slack (the margin) it is the preemption the design allows.
	bad.ValidUntil = 3300 * ms
	if vs := Check(events, Data{Dirs: []Dir{{Node: 0, Version: 1, Files: map[int64][]Record{1: {ok, bad}}}}}, Options{DeadlineSlack: 400 * time.Millisecond}); len(vs) != 0 {
		t.Fatalf("a deadline 300 ms past the start with 400 ms slack: %v", vs)
	}
}

// A record written past its own lease deadline, one whose writer never
// started, and one without evidence are each flagged, once, though the
// record sits in two directories (a hard link or a copy).
func TestRecordsAreCheckedOnceAgainstTheirTenure(t *testing.T) {
	events := []Event{{Kind: KindStart, Node: 0, Version: 1, Task: "a", Mono: 1 * ms}}
	late := Record{Node: 0, Version: 1, Task: "a", Seq: 1, Begin: 200 * ms, ValidUntil: 150 * ms}
	ghost := rec(0, 1, "ghost", 1, 10)
	bare := Record{Node: 0, Version: 1, Task: "a", Seq: 2}
	files := map[int64][]Record{1: {late, ghost, bare}}
	data := Data{Dirs: []Dir{{Node: 0, Version: 1, Files: files}, {Node: 0, Version: 2, Files: files}}}
	vs := Check(events, data, Options{DeadlineSlack: time.Second})
	got := rules(vs)
	// ghost also makes v1 a file of two writers (one-writer-per-dir), twice.
	if got[RuleStaleRecord] != 1 || got[RuleRecordNoTenure] != 2 {
		t.Fatalf("violations %v: want one %s (late) and two %s (ghost, bare)", vs, RuleStaleRecord, RuleRecordNoTenure)
	}
	for _, v := range vs {
		switch {
		case v.Rule == RuleStaleRecord && !strings.Contains(v.Detail, "not before its lease deadline"),
			v.Rule == RuleRecordNoTenure && strings.Contains(v.Detail, "ghost") && !strings.Contains(v.Detail, "no start event"),
			v.Rule == RuleRecordNoTenure && strings.Contains(v.Detail, "seq 2") && !strings.Contains(v.Detail, "no begin or deadline"):
			t.Errorf("wrong reason: %v", v)
		}
	}
}
