package main

import "testing"

func TestCpusExceptLeavesOutTheServersCPU(t *testing.T) {
	for _, c := range []struct {
		online string
		cpu    int
		want   string
	}{
		{"0-1", 0, "1"},
		{"0-3", 2, "0,1,3"},
		{"0,2-4", 0, "2,3,4"},
	} {
		got, err := cpusExcept(c.online, c.cpu)
		if err != nil || got != c.want {
			t.Errorf("cpusExcept(%q, %d) = %q, %v; want %q", c.online, c.cpu, got, err, c.want)
		}
	}
	if _, err := cpusExcept("0", 0); err == nil {
		t.Error("one CPU online: nothing to isolate from, but no error")
	}
}
