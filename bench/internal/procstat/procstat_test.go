package procstat

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// Field 2 holds spaces and a parenthesis: fields count from the last ')'.
	stat := "4242 (cbc (otel) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 157 43 9 11 20 0 8 0 100 0 0\n"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * time.Second; got != want { // (157 + 43) ticks of 10 ms
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
}

// TestZombieCPU checks the run case's measure: the CPU read while a
// process is a zombie is all of its own (awk alone), but not that of the
// child it reaped (a shell running awk), and the process can still be
// reaped afterwards.
func TestZombieCPU(t *testing.T) {
	const burn = `awk 'BEGIN { for (i = 0; i < 3000000; i++) s += i }'`
	for _, tc := range []struct {
		name  string
		cmd   string
		ownIs bool // own CPU is the total (else it is a small part of it)
	}{
		{"own", "exec " + burn, true},
		// "; exit 0" keeps the shell from exec'ing awk in its place.
		{"child", burn + "; exit 0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sh", "-c", tc.cmd)
			if err := cmd.Start(); err != nil {
				t.Skip("no sh:", err)
			}
			own, err := ZombieCPU(cmd.Process.Pid)
			if err != nil {
				cmd.Wait()
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("reaping after ZombieCPU: %v", err)
			}
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			all := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()) // with reaped children
			t.Logf("own %v, with children %v", own, all)
			if all < 50*time.Millisecond {
				t.Skipf("awk burnt only %v: too little to tell", all)
			}
			// /proc counts in 10 ms ticks; rusage in µs.
			if d := (all - own).Abs(); tc.ownIs && d > 20*time.Millisecond {
				t.Fatalf("own CPU %v differs from rusage %v by %v", own, all, d)
			}
			if !tc.ownIs && own > all/2 {
				t.Fatalf("own CPU %v is most of the total %v: the child's CPU is in it", own, all)
			}
		})
	}
}
