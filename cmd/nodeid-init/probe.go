package main

import (
	"context"
	"fmt"
	"io"
)

func cmdProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, log, err := adminSession(ctx, "probe", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	s.skipProbe = false
	if err := s.probe(ctx, repo, log); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "s3://%s: conditional writes are enforced (If-None-Match: * and If-Match)\n", s.bucket)
	return nil
}
