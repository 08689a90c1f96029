package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	pintftp "github.com/pin/tftp/v3"
)

// tftpBlockSize is what iPXE asks for on Ethernet, and kubefarm-pxe's cap.
const tftpBlockSize = 1468

// tftpFetch fetches name once with blksize and tsize, as a PXE ROM does,
// and checks the announced and received sizes.
func tftpFetch(addr, name string, size int64) (time.Duration, error) {
	c, err := pintftp.NewClient(addr)
	if err != nil {
		return 0, err
	}
	c.SetBlockSize(tftpBlockSize)
	c.RequestTSize(true)
	c.SetTimeout(time.Second)
	c.SetRetries(5)
	start := time.Now()
	wt, err := c.Receive(name, "octet")
	if err != nil {
		return 0, err
	}
	if it, ok := wt.(pintftp.IncomingTransfer); ok {
		if n, ok := it.Size(); !ok || n != size {
			return 0, fmt.Errorf("tsize %d (announced %v), want %d", n, ok, size)
		}
	}
	n, err := wt.WriteTo(io.Discard)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if n != size {
		return 0, fmt.Errorf("received %d bytes, want %d", n, size)
	}
	return d, nil
}

// tftpSample is one server's TFTP figures over all its repetitions.
type tftpSample struct {
	seq      []time.Duration // sequential single fetches
	par      []time.Duration // per-fetch latency inside parallel rounds
	parWalls []time.Duration // wall time of each parallel round
	failures int
	fetches  int
	cpu      time.Duration
}

// tftpRep runs seq sequential fetches, then rounds rounds of parallel
// simultaneous fetches, adding to s.
func tftpRep(addr, name string, size int64, seq, parallel, rounds int, s *tftpSample) {
	for i := 0; i < seq; i++ {
		d, err := tftpFetch(addr, name, size)
		s.fetches++
		if err != nil {
			s.failures++
			continue
		}
		s.seq = append(s.seq, d)
	}
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		gate := make(chan struct{})
		for i := 0; i < parallel; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				d, err := tftpFetch(addr, name, size)
				mu.Lock()
				defer mu.Unlock()
				s.fetches++
				if err != nil {
					s.failures++
					return
				}
				s.par = append(s.par, d)
			}()
		}
		time.Sleep(10 * time.Millisecond) // let every goroutine reach the gate
		start := time.Now()
		close(gate)
		wg.Wait()
		s.parWalls = append(s.parWalls, time.Since(start))
	}
}

// httpClient is a plain HTTP/1.1 client with a connection per worker.
func httpClient(conc int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DisableCompression:  true,
		MaxIdleConnsPerHost: conc,
		IdleConnTimeout:     time.Minute,
	}}
}

// httpGet downloads url (the first length bytes when length is less than
// size, by Range) into buf-sized reads and discards it, checking the length.
// When sum is set the body is hashed and the hex digest returned.
func httpGet(ctx context.Context, c *http.Client, url string, size, length int64, buf []byte, sum bool) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	want := http.StatusOK
	if length < size {
		req.Header.Set("Range", "bytes=0-"+strconv.FormatInt(length-1, 10))
		want = http.StatusPartialContent
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var w io.Writer = discard{}
	h := sha256.New()
	if sum {
		w = h
	}
	// CopyBuffer with a writer that has no ReadFrom, so reads are buf-sized
	// (io.Discard's ReadFrom would read 8 KiB at a time).
	n, err := io.CopyBuffer(w, resp.Body, buf)
	if err != nil {
		return "", err
	}
	if n != length {
		return "", fmt.Errorf("GET %s: %d bytes, want %d", url, n, length)
	}
	if sum {
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	return "", nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// httpLevel runs downloads downloads of length bytes each on conc workers,
// all starting together, and returns the wall time until the last ends.
func httpLevel(url string, size, length int64, conc, downloads int) (time.Duration, error) {
	c := httpClient(conc)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs := make(chan struct{}, downloads)
	for i := 0; i < downloads; i++ {
		jobs <- struct{}{}
	}
	close(jobs)
	gate := make(chan struct{})
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			<-gate
			for range jobs {
				if _, err := httpGet(ctx, c, url, size, length, buf, false); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	close(gate)
	wg.Wait()
	wall := time.Since(start)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return wall, nil
}
