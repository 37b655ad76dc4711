//go:build linux

// Command efsmount mounts an efsfs latency file system and serves it until
// SIGTERM or SIGINT, for benchmarks driven by scripts (scripts/bench-datadir.sh).
// It prints "mounted" on stdout once the mount is usable. SIGUSR1 makes
// every operation hang (efsfs.FS.HangAll), SIGUSR2 releases them, for the
// chaos experiment "file system hangs".
//
//	efsmount -backing DIR -mnt DIR [-meta 1ms] [-fsync 1ms] [-data 300us] [-cache 1s]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeid/nodeid/internal/efsfs"
)

func main() {
	p := efsfs.EFS
	backing := flag.String("backing", "", "directory to loop back to (required)")
	mnt := flag.String("mnt", "", "mount point (required)")
	flag.DurationVar(&p.Meta, "meta", p.Meta, "latency per metadata operation")
	flag.DurationVar(&p.Fsync, "fsync", p.Fsync, "latency per fsync")
	flag.DurationVar(&p.Data, "data", p.Data, "latency per read or write call")
	flag.DurationVar(&p.Cache, "cache", p.Cache, "how long the kernel caches names and attributes")
	counts := flag.Bool("counts", false, "print the operation counts on stderr at exit")
	flag.Parse()
	if *backing == "" || *mnt == "" {
		flag.Usage()
		os.Exit(2)
	}
	f, err := efsfs.Mount(*backing, *mnt, p)
	if err != nil {
		fmt.Fprintln(os.Stderr, "efsmount:", err)
		os.Exit(1)
	}
	fmt.Println("mounted")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	for s := <-sig; s == syscall.SIGUSR1 || s == syscall.SIGUSR2; s = <-sig {
		if s == syscall.SIGUSR1 {
			f.HangAll()
			fmt.Println("hanging")
		} else {
			f.Release()
			fmt.Println("released")
		}
	}
	if *counts {
		fmt.Fprintln(os.Stderr, "efsmount: operations:", f.Counts())
	}
	if err := f.Unmount(); err != nil {
		fmt.Fprintln(os.Stderr, "efsmount:", err)
		os.Exit(1)
	}
}
