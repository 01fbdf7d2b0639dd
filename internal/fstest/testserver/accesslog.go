package testserver

import (
	"bufio"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// BucketRequests are the requests to one bucket in a span of the
// gateway's access log.
type BucketRequests struct {
	Requests  int64
	Ops       map[string]int64 // "GetObject" → n
	BytesSent int64            // response bytes (downloads)
	Errors    int64            // HTTP status >= 400
}

// LogOffset is the access log's size now: requests logged after it belong
// to whatever runs next. 0 when there is no log yet.
func (s *S3Server) LogOffset() int64 {
	if s.AccessLog == "" {
		return 0
	}
	fi, err := os.Stat(s.AccessLog)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// RequestsSince reads the access log from off and counts the requests by
// bucket. The gateway writes its log as it answers, a moment after the
// client has its answer, so the file is read once its size has stopped
// changing for 100 ms (waiting at most 5 s).
func (s *S3Server) RequestsSince(off int64) (map[string]*BucketRequests, error) {
	if s.AccessLog == "" {
		return nil, errors.New("testserver: this gateway keeps no access log (StartS3 starts one that does)")
	}
	last := int64(-1)
	for i := 0; i < 50; i++ {
		n := s.LogOffset()
		if n == last {
			break
		}
		last = n
		time.Sleep(100 * time.Millisecond)
	}
	f, err := os.Open(s.AccessLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, err
	}
	out := map[string]*BucketRequests{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		// owner bucket [time zone] ip requester request-id operation key
		// request-uri status error bytes-sent object-size total-time …
		fs := strings.Fields(sc.Text())
		if len(fs) < 14 || !strings.HasPrefix(fs[7], "s3_") {
			continue
		}
		c := out[fs[1]]
		if c == nil {
			c = &BucketRequests{Ops: map[string]int64{}}
			out[fs[1]] = c
		}
		c.Requests++
		c.Ops[strings.TrimPrefix(fs[7], "s3_")]++
		if st, err := strconv.Atoi(fs[10]); err == nil && st >= 400 {
			c.Errors++
		}
		if n, err := strconv.ParseInt(fs[12], 10, 64); err == nil {
			c.BytesSent += n
		}
	}
	return out, sc.Err()
}
