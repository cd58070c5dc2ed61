package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// placement is where the measured processes run during a window.
//
//   - "shared": every process on every CPU, as on a machine where the
//     API server and kube-fanout share cores (how the earlier runs ran).
//   - "isolated": kube-fanout alone on one CPU; the API server, etcd and
//     this load generator (its watchers and its writer) on the others.
//     The kernel still runs its own work on kube-fanout's CPU (interrupts,
//     and the loopback receive of what is sent from there), and other
//     sessions on a shared machine may too: isolated from the API server,
//     not from the machine.
type placement string

const (
	shared   placement = "shared"
	isolated placement = "isolated"
)

// parsePlacements reads -placements: a comma-separated list of placements.
func parsePlacements(list string) ([]placement, error) {
	var out []placement
	for _, p := range strings.Split(list, ",") {
		switch placement(p) {
		case shared, isolated:
			out = append(out, placement(p))
		default:
			return nil, fmt.Errorf("unknown placement %q (shared, isolated)", p)
		}
	}
	return out, nil
}

// apply moves every thread of the processes (and of this one) to the
// placement's CPUs; threads started later inherit their creator's CPUs.
// fanoutCPU is kube-fanout's CPU when isolated.
func (p placement) apply(pids processes, fanoutCPU int) error {
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return err
	}
	all := strings.TrimSpace(string(online))
	others, err := cpusExcept(all, fanoutCPU)
	if err != nil {
		return err
	}
	cpus := map[string]string{"loadgen": all}
	for name := range pids {
		cpus[name] = all
	}
	if p == isolated {
		for name := range cpus {
			cpus[name] = others
		}
		cpus["kube-fanout"] = strconv.Itoa(fanoutCPU)
	}
	for name, list := range cpus {
		pid := os.Getpid()
		if name != "loadgen" {
			pid = pids[name]
		}
		out, err := exec.Command("taskset", "-a", "-p", "-c", list, strconv.Itoa(pid)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset %s of %s (%d): %w: %s", list, name, pid, err, out)
		}
	}
	return nil
}

// cpusExcept is the CPU list online (say "0-3" or "0,2-5") without cpu,
// as taskset reads lists.
func cpusExcept(online string, cpu int) (string, error) {
	var rest []string
	for _, part := range strings.Split(online, ",") {
		lo, hi, found := strings.Cut(part, "-")
		if !found {
			hi = lo
		}
		from, err1 := strconv.Atoi(lo)
		to, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil {
			return "", fmt.Errorf("cannot read the CPU list %q", online)
		}
		for c := from; c <= to; c++ {
			if c != cpu {
				rest = append(rest, strconv.Itoa(c))
			}
		}
	}
	if len(rest) == 0 {
		return "", fmt.Errorf("CPU %d is the only one online (%s): nothing to isolate it from", cpu, online)
	}
	return strings.Join(rest, ","), nil
}
