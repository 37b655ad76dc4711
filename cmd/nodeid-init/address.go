package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// metadataTimeout bounds each read of the ECS task metadata endpoint: it is
// local to the task, so a slow answer means it is not there.
const metadataTimeout = 3 * time.Second

// addressSources are where an advertised address can come from when none
// is configured; tests replace them.
type addressSources struct {
	metadataURI string                         // $ECS_CONTAINER_METADATA_URI_V4; "" off ECS
	client      *http.Client                   // for the metadata endpoint
	hostAddress func() (net.IP, string, error) // the host's primary address and how it was found
}

func defaultAddressSources() addressSources {
	return addressSources{metadataURI: os.Getenv("ECS_CONTAINER_METADATA_URI_V4"), client: http.DefaultClient, hostAddress: hostAddress}
}

// resolveAddress returns the address to publish and where it came from:
// the configured one (already validated), else the ECS task's private IPv4
// (awsvpc), else the host's primary address. It returns "" when nothing
// usable is found: the lease then carries no address, which peers show as
// unknown, and that is not worth refusing to start for.
func resolveAddress(ctx context.Context, s *settings, src addressSources, log *slog.Logger) (addr, source string) {
	if s.advertiseAddress != "" {
		return s.advertiseAddress, s.sources["advertise-address"]
	}
	if src.metadataURI != "" {
		ip, err := ecsTaskIPv4(ctx, src.client, src.metadataURI)
		if err == nil {
			return ip, "ECS task metadata"
		}
		log.Warn("no address from the ECS task metadata, using the host's", "err", err)
	}
	if src.hostAddress != nil {
		ip, how, err := src.hostAddress()
		if err == nil {
			if a := ip.String(); nodeid.ValidateAddress(a) == nil {
				return a, how
			}
		}
		log.Warn("no address to advertise: peers will show this task's address as unknown; set --advertise-address", "err", err)
	}
	return "", ""
}

// taskMetadata is the part of the ECS task metadata (v4) nodeid-init reads.
type taskMetadata struct {
	TaskARN    string `json:"TaskARN"`
	Containers []struct {
		Networks []struct {
			NetworkMode   string   `json:"NetworkMode"`
			IPv4Addresses []string `json:"IPv4Addresses"`
		} `json:"Networks"`
	} `json:"Containers"`
}

// fetchTaskMetadata reads $ECS_CONTAINER_METADATA_URI_V4/task.
func fetchTaskMetadata(ctx context.Context, client *http.Client, uri string) (taskMetadata, error) {
	var meta taskMetadata
	ctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(uri, "/")+"/task", nil)
	if err != nil {
		return meta, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return meta, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return meta, fmt.Errorf("task metadata: HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&meta); err != nil {
		return meta, fmt.Errorf("task metadata: %w", err)
	}
	return meta, nil
}

// ecsTaskIPv4 returns the task's private IPv4 in awsvpc mode, where every
// container shares the task's ENI. Other modes are skipped: a bridge
// address is not reachable from other hosts.
func ecsTaskIPv4(ctx context.Context, client *http.Client, uri string) (string, error) {
	meta, err := fetchTaskMetadata(ctx, client, uri)
	if err != nil {
		return "", err
	}
	for _, c := range meta.Containers {
		for _, n := range c.Networks {
			if n.NetworkMode != "awsvpc" || len(n.IPv4Addresses) == 0 {
				continue
			}
			ip := net.ParseIP(n.IPv4Addresses[0])
			if ip == nil || ip.To4() == nil || ip.IsUnspecified() {
				return "", fmt.Errorf("task metadata: %q is not an IPv4 address", n.IPv4Addresses[0])
			}
			return ip.String(), nil
		}
	}
	return "", errors.New("task metadata: no awsvpc network with an IPv4 address")
}

// hostAddress is the source address the kernel would use towards a public
// address (a UDP "connect" sends nothing), else the first non-loopback
// unicast IPv4 of an interface that is up.
func hostAddress() (net.IP, string, error) {
	if conn, err := net.Dial("udp4", "8.8.8.8:53"); err == nil { // any address off the host takes the default route
		ip := conn.LocalAddr().(*net.UDPAddr).IP
		conn.Close()
		if !ip.IsLoopback() && !ip.IsUnspecified() {
			return ip, "host's primary address (default route)", nil
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, "", err
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip := n.IP.To4(); ip != nil && ip.IsGlobalUnicast() {
					return ip, "address of interface " + ifc.Name, nil
				}
			}
		}
	}
	return nil, "", errors.New("no default route and no interface with a non-loopback IPv4 address")
}
