package main

import (
	"strings"
	"testing"
)

func TestParseATFTPTrace(t *testing.T) {
	// atftp 0.8 --trace, shortened: a lockstep fetch of 2 blocks after an
	// OACK without windowsize, and a windowed one where the OACK grants it
	// and only the window's last block is acknowledged.
	lockstep := strings.Join([]string{
		"Trace mode on.",
		"Option windowsize = 8",
		"sent RRQ <file: ipxe.efi, mode: octet <tsize: 0, blksize: 1468, windowsize: 8>>",
		"received OACK <tsize: 2000, blksize: 1468, \b\b>",
		"sent ACK <block: 0>",
		"received 1. DATA <block: 1, size 1468>, update last received block: 0 → 1",
		"sent ACK <block: 1>",
		"received 1. DATA <block: 2, size 532>, update last received block: 1 → 2",
		"sent ACK <block: 2>",
	}, "\n")
	p := parseATFTPTrace(lockstep)
	if p.OACK != "tsize: 2000, blksize: 1468" || p.WindowsizeGranted || p.DataBlocks != 2 || p.ACKs != 3 || p.Bytes != 2000 {
		t.Errorf("lockstep trace: %+v", p)
	}
	windowed := strings.Join([]string{
		"received OACK <tsize: 2000, blksize: 1468, windowsize: 2, \b\b>",
		"sent ACK <block: 0>",
		"received 1. DATA <block: 1, size 1468>, update last received block: 0 → 1",
		"received 2. DATA <block: 2, size 532>, update last received block: 1 → 2",
		"sent ACK <block: 2>",
	}, "\n")
	p = parseATFTPTrace(windowed)
	if !p.WindowsizeGranted || p.DataBlocks != 2 || p.ACKs != 2 || p.Bytes != 2000 {
		t.Errorf("windowed trace: %+v", p)
	}
}
