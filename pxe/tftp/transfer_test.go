package tftp

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// modelClient is an RFC 7440 receiver written into the test, standing in
// for the network so that the sender's state machine runs without sockets
// or clocks: send hands it the server's packet, recv returns its next
// reply or, when it has none, errTimeout at once (the server's wait ran
// out). It takes blocks in order only, acknowledges the last block it
// holds after window blocks since its last ACK and at the end of the file,
// and answers
// a block it did not expect with the ACK of the last block it holds (what
// EDK2's MTFTP4, atftp and curl do). The real clients run against the real
// socket in TestClients and TestWindowsize.
type modelClient struct {
	t         *testing.T
	window    int
	blockSize int
	// loseData is asked for each DATA packet, with how many times that
	// block number arrived before; loseACK for each ACK the client sends.
	loseData func(block uint16, seen int) bool
	loseACK  func(block uint16) bool
	// abortAt makes the client answer that block with an ERROR.
	abortAt uint16

	expect   uint16 // next block wanted
	inWindow int
	got      []byte
	done     bool
	seen     map[uint16]int
	queue    [][]byte
	dataSent int // DATA packets the server sent
}

func newModelClient(t *testing.T, window, blockSize int) *modelClient {
	return &modelClient{t: t, window: window, blockSize: blockSize, expect: 1, seen: map[uint16]int{}}
}

func (c *modelClient) ack(block uint16) {
	// A window is counted from the client's last ACK, as EDK2 counts it.
	c.inWindow = 0
	if c.loseACK != nil && c.loseACK(block) {
		return
	}
	c.queue = append(c.queue, []byte{0, opACK, byte(block >> 8), byte(block)})
}

func (c *modelClient) send(p []byte) error {
	switch binary.BigEndian.Uint16(p) {
	case opOACK:
		c.ack(0)
	case opDATA:
		c.dataSent++
		block, data := binary.BigEndian.Uint16(p[2:]), p[4:]
		seen := c.seen[block]
		c.seen[block]++
		if c.loseData != nil && c.loseData(block, seen) {
			return nil
		}
		if block == c.abortAt && c.abortAt != 0 {
			c.queue = append(c.queue, appendError(nil, errCodeUndefined, "disk full"))
			return nil
		}
		if block != c.expect || c.done {
			c.ack(c.expect - 1)
			return nil
		}
		c.got = append(c.got, data...)
		c.expect++
		c.inWindow++
		last := len(data) < c.blockSize
		if last {
			c.done = true
		}
		if c.inWindow == c.window || last {
			c.ack(block)
		}
	case opERROR:
	default:
		c.t.Errorf("server sent opcode %d", binary.BigEndian.Uint16(p))
	}
	return nil
}

func (c *modelClient) recv(b []byte, _ time.Duration) (int, error) {
	if len(c.queue) == 0 {
		return 0, errTimeout
	}
	p := c.queue[0]
	c.queue = c.queue[1:]
	return copy(b, p), nil
}

func randomFile(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTransfer(t *testing.T) {
	const bs = 1468
	for _, tc := range []struct {
		name     string
		size     int
		window   int
		loseData func(block uint16, seen int) bool
		loseACK  func(block uint16) bool
		// maxData bounds the DATA packets sent: a resend storm fails it.
		maxData int
	}{
		{name: "lockstep", size: 580*bs - 100, window: 1, maxData: 580},
		{name: "size a multiple of the block: an empty last block", size: 10 * bs, window: 1, maxData: 11},
		{name: "empty file", size: 0, window: 4, maxData: 1},
		{name: "window of 4", size: 580*bs - 100, window: 4, maxData: 580},
		{name: "window larger than the file", size: 3 * bs, window: 16, maxData: 4},
		{name: "lockstep, lost ACK: the block again", size: 20 * bs, window: 1,
			loseACK: once(3), maxData: 22},
		{name: "lockstep, lost DATA", size: 20 * bs, window: 1,
			loseData: firstTime(5), maxData: 22},
		{name: "window, block lost mid-window: resumed after the block before it", size: 40 * bs, window: 8,
			loseData: firstTime(12), maxData: 41 + 8},
		{name: "window, first block of a window lost: resent after the timeout", size: 40 * bs, window: 8,
			loseData: firstTime(9), maxData: 41 + 8},
		{name: "window, its ACK lost", size: 40 * bs, window: 8,
			loseACK: once(16), maxData: 41 + 8},
		// 28 losses: each may cost the rest of its window again, no more.
		{name: "window, every 7th first send lost", size: 200 * bs, window: 8,
			loseData: func(b uint16, seen int) bool { return seen == 0 && b%7 == 0 }, maxData: 201 + 28*8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := randomFile(t, tc.size)
			c := newModelClient(t, tc.window, bs)
			c.loseData, c.loseACK = tc.loseData, tc.loseACK
			opts := []option{{"blksize", "1468"}, {"windowsize", "16"}}
			tr := newTransfer(c, bytes.NewReader(file), int64(len(file)),
				negotiate(opts, int64(len(file)), limits{maxBlockSize: bs, maxWindowSize: tc.window}), time.Second, 5)
			n, err := tr.run()
			if err != nil {
				t.Fatalf("run: %v (after %d bytes)", err, n)
			}
			if n != int64(len(file)) || !bytes.Equal(c.got, file) {
				t.Fatalf("sent %d bytes, client holds %d, want the %d-byte file intact", n, len(c.got), len(file))
			}
			if c.dataSent > tc.maxData {
				t.Errorf("%d DATA packets sent, want at most %d", c.dataSent, tc.maxData)
			}
		})
	}
}

// once loses the first ACK of block.
func once(block uint16) func(uint16) bool {
	lost := false
	return func(b uint16) bool {
		if b == block && !lost {
			lost = true
			return true
		}
		return false
	}
}

// firstTime loses the first send of block.
func firstTime(block uint16) func(uint16, int) bool {
	return func(b uint16, seen int) bool { return b == block && seen == 0 }
}

// TestTransferBlockNumbersWrap: a file of more than 65535 blocks goes
// through with block numbers wrapping to 0, and ACKs are matched modulo
// 65536, also when a window spans the wrap.
func TestTransferBlockNumbersWrap(t *testing.T) {
	const bs = 8
	file := randomFile(t, 70000*bs+3)
	for _, window := range []int{1, 7} {
		c := newModelClient(t, window, bs)
		// Block 65537 (1 on the wire, right after the wrap) is lost once:
		// the ACK of 65536 (0) must resume the transfer after it.
		lost := false
		c.loseData = func(b uint16, _ int) bool {
			if b == 1 && !lost && len(c.got) > 60000*bs {
				lost = true
				return true
			}
			return false
		}
		tr := newTransfer(c, bytes.NewReader(file), int64(len(file)),
			terms{blockSize: bs, windowSize: window}, time.Second, 5)
		if n, err := tr.run(); err != nil || !bytes.Equal(c.got, file) || !lost {
			t.Fatalf("window %d: %d bytes sent, err %v; client holds %d of %d (block lost after the wrap: %v)", window, n, err, len(c.got), len(file), lost)
		}
	}
}

func TestTransferFailures(t *testing.T) {
	const bs = 512
	file := randomFile(t, 10*bs)
	t.Run("client silent: gives up after the retries", func(t *testing.T) {
		c := newModelClient(t, 1, bs)
		c.loseACK = func(uint16) bool { return true }
		tr := newTransfer(c, bytes.NewReader(file), int64(len(file)), terms{blockSize: bs, windowSize: 1}, time.Second, 3)
		if _, err := tr.run(); !errors.Is(err, errGaveUp) {
			t.Fatalf("err = %v, want %v", err, errGaveUp)
		}
		if c.dataSent != 4 {
			t.Errorf("block 1 sent %d times, want 1 + 3 retries", c.dataSent)
		}
	})
	t.Run("OACK never acknowledged", func(t *testing.T) {
		c := newModelClient(t, 1, bs)
		c.loseACK = func(uint16) bool { return true }
		tr := newTransfer(c, bytes.NewReader(file), int64(len(file)),
			terms{blockSize: bs, windowSize: 1, oack: []option{{"tsize", "5120"}}}, time.Second, 2)
		if _, err := tr.run(); !errors.Is(err, errGaveUp) || c.dataSent != 0 {
			t.Fatalf("err = %v with %d DATA sent, want %v and none", err, c.dataSent, errGaveUp)
		}
	})
	t.Run("client error ends the transfer", func(t *testing.T) {
		c := newModelClient(t, 1, bs)
		c.abortAt = 4
		tr := newTransfer(c, bytes.NewReader(file), int64(len(file)), terms{blockSize: bs, windowSize: 1}, time.Second, 3)
		n, err := tr.run()
		if !errors.Is(err, errClientAbort) || n != 3*bs {
			t.Fatalf("err = %v after %d bytes, want %v after %d", err, n, errClientAbort, 3*bs)
		}
	})
	t.Run("file shorter than its size: refused, not padded", func(t *testing.T) {
		c := newModelClient(t, 1, bs)
		tr := newTransfer(c, bytes.NewReader(file[:5*bs]), int64(len(file)), terms{blockSize: bs, windowSize: 1}, time.Second, 3)
		if _, err := tr.run(); !errors.Is(err, errFileChanged) {
			t.Fatalf("err = %v, want %v", err, errFileChanged)
		}
	})
	t.Run("stray packets do not extend the wait", func(t *testing.T) {
		c := &strayConn{at: time.Unix(0, 0)}
		tr := newTransfer(c, bytes.NewReader(file), int64(len(file)), terms{blockSize: bs, windowSize: 1}, time.Second, 1)
		tr.now = func() time.Time { return c.at }
		if _, err := tr.run(); !errors.Is(err, errGaveUp) {
			t.Fatalf("err = %v, want %v", err, errGaveUp)
		}
		if c.sends != 2 {
			t.Errorf("block 1 sent %d times, want 2", c.sends)
		}
	})
}

// strayConn answers every wait with an ACK of block 0 (repeated, never
// progress) a tenth of the time left later on its clock, as a client
// flooding old ACKs would: the transfer must still time out on schedule.
type strayConn struct {
	sends int
	at    time.Time
}

func (c *strayConn) send([]byte) error { c.sends++; return nil }

func (c *strayConn) recv(b []byte, timeout time.Duration) (int, error) {
	c.at = c.at.Add(max(timeout/10, time.Millisecond))
	return copy(b, []byte{0, opACK, 0, 0}), nil
}
