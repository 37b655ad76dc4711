package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/nodeid/nodeid/nodeid"
)

// resolveTaskID returns this task's identity: NODEID_TASK_ID, else the ECS
// task ARN from the container metadata endpoint, else the hostname (any
// character but letters, digits and dots replaced by '-') plus a random
// suffix (a restarted process is a new task: it must not mistake the lease
// of its previous life for its own).
func resolveTaskID(ctx context.Context, s *settings, log *slog.Logger) (string, error) {
	if s.taskID != "" {
		return s.taskID, nil
	}
	if uri := os.Getenv("ECS_CONTAINER_METADATA_URI_V4"); uri != "" {
		arn, err := ecsTaskARN(ctx, uri)
		if err == nil {
			return arn, nil
		}
		log.Warn("ECS task metadata unavailable, using the hostname", "err", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "task"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' {
			return r
		}
		return '-' // not a hostname's character: never shell syntax either
	}, host) + "-" + hex.EncodeToString(b[:])
	return id, nodeid.ValidateTaskID(id)
}

func ecsTaskARN(ctx context.Context, uri string) (string, error) {
	meta, err := fetchTaskMetadata(ctx, http.DefaultClient, uri)
	if err != nil {
		return "", err
	}
	if err := nodeid.ValidateTaskID(meta.TaskARN); err != nil {
		return "", fmt.Errorf("task metadata TaskARN: %w", err)
	}
	return meta.TaskARN, nil
}
