// Command chaos runs the chaos experiments of package chaos against real
// nodeid-init processes and VersityGW, prints a table of the results and
// writes docs/chaos-report.md.
//
//	go run ./chaos/cmd/chaos -all            # every experiment (make chaos)
//	go run ./chaos/cmd/chaos -run pause      # one, by name
//	go run ./chaos/cmd/chaos -list
//
// It exits 1 if any experiment failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/chaos"
)

func main() { os.Exit(run()) }

func run() int {
	all := flag.Bool("all", false, "run every experiment")
	short := flag.Bool("short", false, "run the short subset that CI runs")
	names := flag.String("run", "", "comma-separated experiment names to run")
	list := flag.Bool("list", false, "list the experiments")
	report := flag.String("report", "", "write the Markdown report to this file (default docs/chaos-report.md with -all, none otherwise)")
	keep := flag.Bool("keep", false, "keep the work directories of passing experiments too")
	flag.Parse()

	if *list {
		for _, e := range chaos.Experiments() {
			fmt.Printf("%d %-22s %s\n", e.Number, e.Name, e.Does)
		}
		return 0
	}
	var selected []*chaos.Experiment
	switch {
	case *all:
		selected = chaos.Experiments()
	case *short:
		for _, e := range chaos.Experiments() {
			if e.Short {
				selected = append(selected, e)
			}
		}
	case *names != "":
		for _, n := range strings.Split(*names, ",") {
			e, ok := chaos.Lookup(strings.TrimSpace(n))
			if !ok {
				fmt.Fprintf(os.Stderr, "chaos: unknown experiment %q (see -list)\n", n)
				return 2
			}
			selected = append(selected, e)
		}
	default:
		fmt.Fprintln(os.Stderr, "chaos: give -all, -short, -run NAME[,NAME] or -list")
		return 2
	}
	if *report == "" && *all {
		*report = "docs/chaos-report.md"
	}

	// SIGINT/SIGTERM cancel the running experiment, which then stops its
	// processes; nothing is left behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	versity, err := chaos.FindVersity()
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 1
	}
	work, err := os.MkdirTemp("", "nodeid-chaos-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 1
	}
	nodeInit, broker, err := chaos.Build(ctx, work)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 1
	}
	cfg := chaos.Config{NodeInit: nodeInit, Broker: broker, Versity: versity, WorkDir: work, Keep: *keep,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
		}}
	started := time.Now()
	var results []*chaos.Result
	failed := 0
	for _, e := range selected {
		if ctx.Err() != nil {
			break
		}
		r := chaos.Run(ctx, cfg, e)
		results = append(results, r)
		if !r.Pass {
			failed++
			fmt.Fprintf(os.Stderr, "%s: FAILED, files kept in %s\n", e.Name, r.Dir)
		}
	}
	fmt.Println(chaos.Table(results))
	fmt.Printf("%d of %d passed in %v\n", len(results)-failed, len(results), time.Since(started).Round(time.Second))
	if *report != "" {
		cmd := "go run ./chaos/cmd/chaos " + strings.Join(os.Args[1:], " ")
		if *all {
			cmd = "make chaos (" + cmd + ")"
		}
		if err := os.WriteFile(*report, []byte(chaos.Markdown(results, cmd, started)), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: report: %v\n", err)
			return 1
		}
		fmt.Printf("report written to %s\n", *report)
	}
	if failed == 0 {
		os.RemoveAll(work)
	} else {
		fmt.Fprintf(os.Stderr, "binaries and failed experiments' files kept in %s\n", work)
	}
	if failed > 0 || len(results) < len(selected) {
		return 1
	}
	return 0
}
