package main

import (
	"fmt"
	"os"
	"slices"
	"testing"
)

func TestParseStat(t *testing.T) {
	// comm may hold spaces and parentheses; num_threads is field 20.
	line := "4242 (a) (b c) S 17 4200 4200 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 7 0 1 2 3\n"
	p, ok := parseStat([]byte(line))
	if !ok || p != (proc{pid: 4242, ppid: 17, pgid: 4200, threads: 7, state: 'S'}) {
		t.Fatalf("parseStat = %+v, %v", p, ok)
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S 1 2", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18"} {
		if _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := parseStat(b); !ok || p.pid != os.Getpid() || p.ppid != os.Getppid() || p.threads < 1 {
		t.Fatalf("own stat parsed as %+v, %v", p, ok)
	}
}

func TestLeftovers(t *testing.T) {
	const self, pgid = 10, 11
	procs := []proc{
		{pid: 1, ppid: 0, pgid: 1, threads: 1, state: 'S'},
		{pid: self, ppid: 1, pgid: 10, threads: 5, state: 'S'},
		{pid: 12, ppid: self, pgid: pgid, threads: 1, state: 'S'},     // group member, reparented to us
		{pid: 13, ppid: self, pgid: 13, threads: 1, state: 'Z'},       // dead daemon ...
		{pid: 14, ppid: 13, pgid: 13, threads: 1, state: 'R'},         // ... whose child was read before it was reparented
		{pid: 15, ppid: 1, pgid: pgid, threads: 1, state: 'D'},        // member that went to init
		{pid: 16, ppid: 1, pgid: pgid, threads: 1, state: 'Z'},        // dead member
		{pid: 17, ppid: self, pgid: 17, threads: 3, state: 'Z'},       // exited main thread, live threads
		{pid: 18, ppid: 1, pgid: 18, threads: 1, state: 'S'},          // unrelated
		{pid: 19, ppid: 18, pgid: 18, threads: 1, state: 'S'},         // unrelated
		{pid: 20, ppid: 14, pgid: 13, threads: 1, state: 'S'},         // grandchild of the dead daemon
		{pid: 21, ppid: self, pgid: pgid, threads: 1, state: 'X'},     // being reaped
		{pid: 22, ppid: 21, pgid: pgid + 100, threads: 1, state: 'S'}, // its child, other group
	}
	var got []int
	for _, p := range leftovers(procs, self, pgid) {
		got = append(got, p.pid)
	}
	slices.Sort(got)
	if want := []int{12, 14, 15, 17, 20, 22}; !slices.Equal(got, want) {
		t.Fatalf("leftovers = %v, want %v", got, want)
	}
	if s := fmt.Sprint(procs[5]); s != "15(D)" {
		t.Errorf("String = %q", s)
	}
}
