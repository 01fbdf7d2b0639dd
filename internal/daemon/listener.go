package daemon

import (
	"context"
	"net"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The listener admits connections without ever making one wait for
// another to close: a client that holds connections open (idle keep-alive,
// headers sent a byte at a time) must not keep a liveness probe out, as
// the listener that waited for a free slot did for 60 s at a time.
//
// Three bounds, checked at accept:
//   - per client address: one address cannot hold more than perAddr
//     connections, so a single host cannot take every slot;
//   - public: at most max connections in all;
//   - reserve: past max, a few more, for probes and scrapes only. A
//     connection admitted into the reserve is served /healthz, /readyz
//     and /metrics and is closed after its answer; anything else there
//     is 503. Each address holds at most reservePerAddr of them.
// A connection past every bound is closed at once: the client sees a
// reset and may try again, instead of queueing behind the abuser.
//
// Many addresses acting together can still fill both; that is what
// metrics_listen is for: a listener of its own, on an address only the
// probes and Prometheus reach.

// Default bounds of the listener.
const (
	// DefaultHTTPMaxPerAddress: a browser opens six connections, a
	// Prometheus one or two.
	DefaultHTTPMaxPerAddress = 16
	// DefaultHTTPHealthReserve connections past the cap serve probes
	// and scrapes only.
	DefaultHTTPHealthReserve = 8
	reservePerAddr           = 2
)

// Reasons a connection is closed at accept, the values of
// http_connections_refused_total's "reason" label.
const (
	refusedPerAddress = "per-address"
	refusedFull       = "full"
)

// Slots of http_connections_open.
const (
	slotPublic  = "public"
	slotReserve = "reserve"
)

type admitListener struct {
	net.Listener
	max, perAddr, reserve int
	refused               *prometheus.CounterVec
	open                  *prometheus.GaugeVec

	mu        sync.Mutex
	public    int
	reserved  int
	byAddr    map[string]int
	reserveBy map[string]int
}

func newAdmitListener(ln net.Listener, max, perAddr, reserve int, refused *prometheus.CounterVec, open *prometheus.GaugeVec) *admitListener {
	return &admitListener{Listener: ln, max: max, perAddr: perAddr, reserve: reserve, refused: refused, open: open,
		byAddr: map[string]int{}, reserveBy: map[string]int{}}
}

// admittedConn is a connection the listener counts until it is closed.
type admittedConn struct {
	net.Conn
	l       *admitListener
	host    string
	reserve bool
	once    sync.Once
}

func (c *admittedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

func (l *admitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := remoteHost(c.RemoteAddr())
		ac, reason := l.admit(c, host)
		if ac != nil {
			return ac, nil
		}
		l.refused.WithLabelValues(reason).Inc()
		c.Close()
	}
}

func (l *admitListener) admit(c net.Conn, host string) (*admittedConn, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byAddr[host] >= l.perAddr:
		return nil, refusedPerAddress
	case l.public < l.max:
		l.public++
		l.byAddr[host]++
		l.open.WithLabelValues(slotPublic).Inc()
		return &admittedConn{Conn: c, l: l, host: host}, ""
	case l.reserved < l.reserve && l.reserveBy[host] < reservePerAddr:
		l.reserved++
		l.reserveBy[host]++
		l.byAddr[host]++
		l.open.WithLabelValues(slotReserve).Inc()
		return &admittedConn{Conn: c, l: l, host: host, reserve: true}, ""
	}
	return nil, refusedFull
}

func (l *admitListener) release(c *admittedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.reserve {
		l.reserved--
		l.open.WithLabelValues(slotReserve).Dec()
		if l.reserveBy[c.host]--; l.reserveBy[c.host] <= 0 {
			delete(l.reserveBy, c.host)
		}
	} else {
		l.public--
		l.open.WithLabelValues(slotPublic).Dec()
	}
	if l.byAddr[c.host]--; l.byAddr[c.host] <= 0 {
		delete(l.byAddr, c.host)
	}
}

func remoteHost(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

type connKey struct{}

// connContext keeps the admitted connection in its requests' context, so
// that the handler knows one admitted into the reserve.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*admittedConn); ok {
		return context.WithValue(ctx, connKey{}, ac)
	}
	return ctx
}

// reserveOnly serves a connection of the reserve the health paths only,
// and closes it after one answer, so that its slot is free for the next
// probe.
func reserveOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ac, _ := r.Context().Value(connKey{}).(*admittedConn)
		if ac == nil || !ac.reserve {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			next.ServeHTTP(w, r)
		default:
			http.Error(w, "too many connections; try again later", http.StatusServiceUnavailable)
		}
	})
}
