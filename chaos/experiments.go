package chaos

// The registry: every experiment, its number, timing and what it expects.

import "time"

var registry = []*Experiment{
	{
		Number: 1, Name: "lease-overwrite", Short: true, Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does: "Overwrites node 2's lease object from outside with another task ID (abc), a fresh timestamp and the version " +
			"the holder has, as a buggy tool or a second cluster would.",
		Expects: "The holder's next renewal gets 412: its broker is killed and it exits 3. The spare acquires node 2 with " +
			"version K+1 once the foreign lease expires and prepares node-2/v(K+1) by copying vK (not hard-linking: the takeover is not graceful).",
		run: runLeaseOverwrite,
	},
	{
		Number: 2, Name: "lease-delete", Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "Deletes node 1's lease object.",
		Expects: "The holder's next renewal gets 404: it exits 3. The object is recreated with the highest known version and the spare takes node 1 with a higher version than before.",
		run:     runLeaseDelete,
	},
	{
		Number: 3, Name: "kill-9", Short: true, Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "SIGKILLs the supervisor holding node 1; its broker dies with it (Pdeathsig).",
		Expects: "The spare takes node 1 with version K+1 after the lease expires (about L+1 s by the server's clock), copying vK.",
		run:     runKill9,
	},
	{
		Number: 4, Name: "pause", Short: true, Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "SIGSTOPs the supervisor and the broker holding node 0 for 2.5 L, then SIGCONTs them.",
		Expects: "The spare takes node 0 while they are stopped. Once resumed, the old broker writes nothing: its lease file's deadline has passed; the supervisor exits 3.",
		run:     runPause,
	},
	{
		Number: 5, Name: "blackhole", Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "Blackholes S3 for the task holding node 1 (its proxy holds every request) for 3 L, then heals.",
		Expects: "The holder fences itself at its deadline s+L-m (at most L-m after the fault) and exits 3; the spare takes node 1 with version K+1.",
		run:     runBlackhole,
	},
	{
		Number: 6, Name: "latency-503", Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "For 5 L, every task's requests are delayed 20-120 ms and one in ten answered 503 SlowDown: below the renewal budget (T = R/2 = 250 ms, deadline L-m).",
		Expects: "No holder loses its lease, no task takes over, no version changes.",
		run:     runLatency503,
	},
	{
		Number: 7, Name: "rolling-deploy", Size: 3, Timing: ShortTiming, Timeout: 90 * time.Second,
		Does:    "Starts N new tasks beside the N old holders, then SIGTERMs the old ones one by one, as an ECS deployment does.",
		Expects: "Each old task drains (broker stops, lease released, exit 0); a new task takes each ID at once with version K+1, NODE_PREVIOUS_GRACEFUL=true, and vK's files hard-linked into v(K+1) with no record lost.",
		run:     runRollingDeploy,
	},
	{
		Number: 8, Name: "start-storm", Size: 50, Timeout: 150 * time.Second,
		Timing:  Timing{Lease: 4 * time.Second, Renew: time.Second, Poll: 500 * time.Millisecond},
		Does:    "Starts 50 tasks for 50 node IDs at the same moment on an empty bucket (lease 4 s, so 100 processes on a small machine do not starve renewals).",
		Expects: "Every task gets a distinct ID with version 1, nobody loses a lease.",
		run:     runStartStorm,
	},
	{
		Number: 8, Name: "start-storm-skip-probe", Size: 50, Timeout: 150 * time.Second,
		Timing:  Timing{Lease: 4 * time.Second, Renew: time.Second, Poll: 500 * time.Millisecond},
		Does:    "The start storm again with NODEID_SKIP_PROBE=true, to measure the acquisition storm itself apart from the start-up probe.",
		Expects: "Every task gets a distinct ID with version 1, nobody loses a lease.",
		run:     runStartStormSkipProbe,
	},
	{
		Number: 9, Name: "clock-skew", Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does: "Holders with wall clocks offset -1 h, 0 and +1 h and a spare at +1 h (NODEID_TEST_CLOCK_OFFSET) run for 4 L; " +
			"then the -1 h holder, whose lease timestamps look an hour old to the spare, is killed.",
		Expects: "No takeover while the holders live (no decision reads a wall clock); after the kill the spare takes that ID with version K+1 as after any crash.",
		run:     runClockSkew,
	},
	{
		Number: 10, Name: "log-driver-blocks", Short: true, Size: 1, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does: "Gives node 0's supervisor a stderr nobody reads, filled up, as a log driver in blocking mode that cannot ship " +
			"(awslogs' default), then overwrites its lease from outside right after a renewal.",
		Expects: "The broker is dead within R + 1 s of the overwrite although every log write of the supervisor would block; " +
			"the supervisor exits 3; the spare takes node 0 with version K+1, copying vK.",
		run: runLogDriverBlocks,
	},
	{
		Number: 11, Name: "fs-hang", Size: 1, Timing: ShortTiming, Timeout: 90 * time.Second,
		Does: "Serves the data root through a FUSE file system (efsfs), makes every operation on it hang, and SIGTERMs node 0's holder: " +
			"its stop sequence's syncfs never returns. The spare then takes the expired lease and its preparation hangs too. Then the file system answers again.",
		Expects: "Both exit 7 within --fs-timeout (2 s) plus 3 s (the holder also within the 1 s stop timeout) without releasing: " +
			"each lease is left to expire. A new task then takes node 0 with version K+2, copying vK.",
		run: runFSHang,
	},
}
