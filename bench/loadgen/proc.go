package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux this runs on).
const clockTicks = 100

// procSample is one process's CPU and memory at an instant.
type procSample struct {
	CPUSeconds float64 // utime+stime, all threads
	RSSBytes   int64   // VmRSS
	HWMBytes   int64   // VmHWM: the peak RSS since the last resetPeak
}

func sample(pid int) (procSample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, err
	}
	// The command name (field 2) may hold spaces: fields count from the ')'.
	rest := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseFloat(rest[11], 64) // field 14
	stime, _ := strconv.ParseFloat(rest[12], 64) // field 15
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, err
	}
	s := procSample{CPUSeconds: (utime + stime) / clockTicks}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kib, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			s.RSSBytes = kib << 10
		case "VmHWM:":
			s.HWMBytes = kib << 10
		}
	}
	return s, nil
}

// resetPeak starts VmHWM again from the current RSS (clear_refs 5).
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// procWindow is what a process used over a measurement window.
type procWindow struct {
	CPUSeconds  float64 `json:"cpu_s"`
	RSSStart    int64   `json:"rss_start"`
	RSSEnd      int64   `json:"rss_end"`
	PeakRSS     int64   `json:"peak_rss"`
	samplesFrom procSample
}

// processes are the measured servers, by name.
type processes map[string]int

func (p processes) start() (map[string]*procWindow, error) {
	out := map[string]*procWindow{}
	for name, pid := range p {
		if err := resetPeak(pid); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		s, err := sample(pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = &procWindow{RSSStart: s.RSSBytes, samplesFrom: s}
	}
	return out, nil
}

func (p processes) end(w map[string]*procWindow) error {
	for name, pid := range p {
		s, err := sample(pid)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		win := w[name]
		win.CPUSeconds = s.CPUSeconds - win.samplesFrom.CPUSeconds
		win.RSSEnd = s.RSSBytes
		win.PeakRSS = s.HWMBytes
	}
	return nil
}
