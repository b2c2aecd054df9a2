// zk_sessions_driver: many ZooKeeper sessions in one process, for bench/zk_sessions.py.
//
// Every session is a real go-zookeeper/zk v1.0.4 *zk.Conn (its own TCP
// connection, ping loop, watches and reconnects). Session i lists the servers
// in its own fixed order: server i%3 first, then the other two in an order
// that alternates with i/3, so that the clients of any one server split evenly
// over the other two when it dies. Each session sets a data watch on a shared
// znode (GetW, re-armed after each notification) and creates an ephemeral
// znode of its own (/zs/e/m<i>, or /zs/e/x<i> for the expire group).
//
// Commands, one a line on stdin; one JSON line answers each on stdout
// (progress on stderr):
//
//	open N                   start N sessions at once; answer when all are watching and hold their
//	                         ephemeral, or at the deadline
//	arm ADDR                 note the sessions attached to ADDR now (its server is about to die)
//	moved                    wait until every noted session is attached again elsewhere
//	fire                     wait until every live session's watch is armed, setData the shared
//	                         znode once, wait until every live session heard of it
//	abandon                  the expire group's connections close and it dials no more (its
//	                         sessions stop without closing, as a killed process's)
//	gone                     wait until the servers removed every ephemeral of the expire group
//	census                   the ephemerals that exist, by group
//	quit
//
// Every wait is bounded by -deadline. A session "told expired" is one that saw
// StateExpired (a refused re-attach, or the server's expiry event); outside the
// abandoned group each one is wrong: its client never stopped trying.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

const (
	sessionBuffer = 64 * 1024
	root          = "/zs"
	watched       = "/zs/w"
	ephemDir      = "/zs/e"
)

var (
	servers   []string
	timeout   time.Duration
	deadline  time.Duration
	expireN   int
	sessions  []*sess
	control   *zk.Conn
	out       = json.NewEncoder(os.Stdout)
	armed     map[int]bool
	armedAddr string
	armedAt   time.Time
)

type nopLogger struct{}

func (nopLogger) Printf(string, ...interface{}) {}

// fixedHosts is go-zookeeper's HostProvider semantics (DNSHostProvider) over an order of our choosing.
type fixedHosts struct {
	mu      sync.Mutex
	servers []string
	curr    int
	last    int
}

func (h *fixedHosts) Init([]string) error { h.curr, h.last = -1, -1; return nil }
func (h *fixedHosts) Len() int            { return len(h.servers) }
func (h *fixedHosts) Next() (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retry := h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retry
}
func (h *fixedHosts) Connected() { h.mu.Lock(); h.last = h.curr; h.mu.Unlock() }

type sess struct {
	idx   int
	name  string
	group string // "m" (kept) or "x" (the expire group)
	conn  *zk.Conn
	dead  atomic.Bool // abandoned: no more dials

	mu        sync.Mutex
	net       net.Conn
	state     zk.State
	server    string
	firstSID  int64
	hasAt     time.Time // last StateHasSession
	firstHas  time.Time
	discAt    time.Time // last StateDisconnected
	expired   int       // StateExpired seen
	newSID    int       // times the session id changed (a new session after an expiry)
	watchAt   time.Time // first GetW that succeeded
	readyAt   time.Time // ephemeral created
	watching  bool      // a data watch is armed now
	fired     int       // data-changed notifications since the last reset
	firedAt   time.Time // first one since the last reset
	errs      int
	lastError string
	attempts  int // StateConnecting: a server tried
	dialFails int // dials that failed (refused, or not accepted within go-zookeeper's 1 s)
	dialTO    int // of which timed out
}

func (s *sess) onEvent(ev zk.Event) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case ev.Type == zk.EventSession:
		if ev.State == zk.StateExpired {
			s.expired++
		}
		if ev.State == zk.StateDisconnected {
			s.discAt = now
		}
		if ev.State == zk.StateConnecting && !s.dead.Load() { // an abandoned session's tries are not the storm's
			s.attempts++
		}
		if ev.State == zk.StateHasSession {
			s.hasAt = now
			s.server = ev.Server
			if s.conn == nil { // connected before zk.Connect returned: run() takes the id
				break
			}
			sid := s.conn.SessionID()
			if s.firstSID == 0 {
				s.firstSID, s.firstHas = sid, now
			} else if sid != s.firstSID {
				s.newSID++
				s.firstSID = sid
			}
		}
		if ev.State != zk.StateUnknown {
			s.state = ev.State
		}
	case ev.Type == zk.EventNodeDataChanged && ev.Path == watched:
		s.fired++
		if s.fired == 1 {
			s.firedAt = now
		}
		s.watching = false
	}
}

func (s *sess) dial(network, address string, t time.Duration) (net.Conn, error) {
	if s.dead.Load() {
		return nil, errors.New("abandoned")
	}
	c, err := net.DialTimeout(network, address, t)
	if err != nil {
		var ne net.Error
		s.mu.Lock()
		s.dialFails++
		if errors.As(err, &ne) && ne.Timeout() {
			s.dialTO++
		}
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Lock()
	s.net = c
	s.mu.Unlock()
	if s.dead.Load() { // abandoned while dialling
		c.Close()
	}
	return c, nil
}

func (s *sess) noteErr(err error) {
	s.mu.Lock()
	s.errs++
	s.lastError = err.Error()
	s.mu.Unlock()
}

// run: connect, watch, create the ephemeral, then keep the watch armed. Each request is retried
// (bounded by the deadline) when the connection drops under it: the storm is the point.
func (s *sess) run(quit <-chan struct{}) {
	order := []string{}
	p := s.idx % len(servers)
	step := 1
	if (s.idx/len(servers))%2 == 1 {
		step = len(servers) - 1
	}
	for k := 0; k < len(servers); k++ {
		order = append(order, servers[(p+k*step)%len(servers)])
	}
	// go-zookeeper's buffers are 1.5 MiB by default, the receive one allocated anew on every
	// connection: 10,000 sessions reconnecting would allocate gigabytes a second and starve this
	// process (its dials then time out, a client-side artifact). Every packet here is small.
	conn, _, err := zk.Connect(order, timeout, zk.WithHostProvider(&fixedHosts{servers: order}),
		zk.WithDialer(s.dial), zk.WithEventCallback(s.onEvent), zk.WithLogger(nopLogger{}), zk.WithLogInfo(false),
		zk.WithMaxBufferSize(sessionBuffer), zk.WithMaxConnBufferSize(sessionBuffer))
	if err != nil {
		s.noteErr(err)
		return
	}
	s.mu.Lock()
	s.conn = conn
	if s.state == zk.StateHasSession && s.firstSID == 0 {
		s.firstSID, s.firstHas = conn.SessionID(), s.hasAt
	}
	s.mu.Unlock()
	end := time.Now().Add(deadline)
	var ch <-chan zk.Event
	arm := func() bool {
		for time.Now().Before(end) && !s.dead.Load() {
			_, _, c, err := conn.GetW(watched)
			if err == nil {
				ch = c
				s.mu.Lock()
				s.watching = true
				if s.watchAt.IsZero() {
					s.watchAt = time.Now()
				}
				s.mu.Unlock()
				return true
			}
			s.noteErr(err)
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	if !arm() {
		return
	}
	for time.Now().Before(end) && !s.dead.Load() {
		_, err := conn.Create(ephemDir+"/"+s.name, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		if err == nil || err == zk.ErrNodeExists {
			s.mu.Lock()
			s.readyAt = time.Now()
			s.mu.Unlock()
			break
		}
		s.noteErr(err)
		time.Sleep(20 * time.Millisecond)
	}
	for {
		select {
		case <-quit:
			return
		case <-ch:
			// a notification, or EventNotWatching (the session was lost): either way arm again
			end = time.Now().Add(deadline)
			if s.dead.Load() || !arm() {
				return
			}
		}
	}
}

func reply(v map[string]interface{}) {
	if err := out.Encode(v); err != nil {
		os.Exit(3)
	}
}

func progress(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "[driver] "+format+"\n", a...)
}

func secs(d time.Duration) float64 { return float64(d.Microseconds()) / 1e6 }

// waitAll polls until done() or the deadline; false at the deadline.
func waitAll(done func() bool, what string) bool {
	end := time.Now().Add(deadline)
	next := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		if done() {
			return true
		}
		if time.Now().After(next) {
			progress("waiting: %s", what)
			next = time.Now().Add(2 * time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return done()
}

func live() []*sess {
	var l []*sess
	for _, s := range sessions {
		if !s.dead.Load() {
			l = append(l, s)
		}
	}
	return l
}

func stats() map[string]interface{} {
	per := map[string]int{}
	expired, newSID, errs, notAttached, attempts, dialFails, dialTO := 0, 0, 0, 0, 0, 0, 0
	var sample []string
	for _, s := range sessions {
		s.mu.Lock()
		if !s.dead.Load() {
			if s.state == zk.StateHasSession {
				per[s.server]++
			} else {
				notAttached++
			}
		}
		if s.expired > 0 || s.newSID > 0 {
			expired++
			if len(sample) < 10 {
				sample = append(sample, fmt.Sprintf("%s sid=0x%x expired=%d new_sessions=%d", s.name,
					uint64(s.firstSID), s.expired, s.newSID))
			}
		}
		newSID += s.newSID
		errs += s.errs
		attempts += s.attempts
		dialFails += s.dialFails
		dialTO += s.dialTO
		s.mu.Unlock()
	}
	return map[string]interface{}{"per_server": per, "sessions_told_expired": expired, "new_sessions": newSID,
		"request_errors": errs, "not_attached": notAttached, "expired_sample": sample,
		"connect_attempts": attempts, "dial_failures": dialFails, "dial_timeouts": dialTO}
}

func merge(a map[string]interface{}, b map[string]interface{}) map[string]interface{} {
	for k, v := range b {
		a[k] = v
	}
	return a
}

func setup() error {
	c, _, err := zk.Connect(servers, timeout, zk.WithLogger(nopLogger{}), zk.WithLogInfo(false))
	if err != nil {
		return err
	}
	control = c
	for _, p := range []string{root, watched, ephemDir} {
		var err error
		for i := 0; i < 100; i++ {
			_, err = c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
			if err == nil || err == zk.ErrNodeExists {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("create %s: %v", p, err)
		}
	}
	return nil
}

func cmdOpen(n int, quit chan struct{}) map[string]interface{} {
	t0 := time.Now()
	for i := 0; i < n; i++ {
		s := &sess{idx: i, group: "m"}
		if i >= n-expireN {
			s.group = "x"
		}
		s.name = fmt.Sprintf("%s%05d", s.group, i)
		sessions = append(sessions, s)
	}
	for _, s := range sessions {
		go s.run(quit)
	}
	progress("open: %d sessions started", n)
	ok := waitAll(func() bool {
		for _, s := range sessions {
			s.mu.Lock()
			r := s.readyAt.IsZero()
			s.mu.Unlock()
			if r {
				return false
			}
		}
		return true
	}, "sessions connecting")
	var connected, watching, ready time.Time
	missing := 0
	for _, s := range sessions {
		s.mu.Lock()
		if s.readyAt.IsZero() {
			missing++
		}
		if s.firstHas.After(connected) {
			connected = s.firstHas
		}
		if s.watchAt.After(watching) {
			watching = s.watchAt
		}
		if s.readyAt.After(ready) {
			ready = s.readyAt
		}
		s.mu.Unlock()
	}
	return merge(map[string]interface{}{"cmd": "open", "ok": ok, "sessions": n, "missing": missing,
		"connected_s": secs(connected.Sub(t0)), "watching_s": secs(watching.Sub(t0)),
		"ready_s": secs(ready.Sub(t0))}, stats())
}

func cmdArm(addr string) map[string]interface{} {
	armed = map[int]bool{}
	armedAddr = addr
	armedAt = time.Now()
	for _, s := range live() {
		s.mu.Lock()
		if s.server == addr && s.state == zk.StateHasSession {
			armed[s.idx] = true
		}
		s.mu.Unlock()
	}
	return map[string]interface{}{"cmd": "arm", "addr": addr, "affected": len(armed)}
}

func cmdMoved() map[string]interface{} {
	moved := func() (int, time.Time, time.Time) {
		n := 0
		var last, firstDisc time.Time
		for _, s := range sessions {
			if !armed[s.idx] {
				continue
			}
			s.mu.Lock()
			if s.state == zk.StateHasSession && s.hasAt.After(armedAt) && s.server != armedAddr {
				n++
				if s.hasAt.After(last) {
					last = s.hasAt
				}
			}
			if s.discAt.After(armedAt) && (firstDisc.IsZero() || s.discAt.Before(firstDisc)) {
				firstDisc = s.discAt
			}
			s.mu.Unlock()
		}
		return n, last, firstDisc
	}
	// a follower that loses its leader closes its clients' connections too (as ZooKeeper's does):
	// every session that was disconnected since, wherever it was, is counted until it is back
	others := func() (int, int, time.Time) {
		dropped, back := 0, 0
		var last time.Time
		for _, s := range live() {
			if armed[s.idx] {
				continue
			}
			s.mu.Lock()
			if s.discAt.After(armedAt) {
				dropped++
				if s.state == zk.StateHasSession && s.hasAt.After(s.discAt) {
					back++
					if s.hasAt.After(last) {
						last = s.hasAt
					}
				}
			}
			s.mu.Unlock()
		}
		return dropped, back, last
	}
	ok := waitAll(func() bool {
		n, _, _ := moved()
		d, b, _ := others()
		return n == len(armed) && d == b
	}, "sessions moving")
	n, last, firstDisc := moved()
	dropped, back, lastOther := others()
	r := map[string]interface{}{"cmd": "moved", "ok": ok, "affected": len(armed), "moved": n,
		"others_dropped": dropped, "others_back": back}
	if dropped > 0 && !firstDisc.IsZero() && !lastOther.IsZero() {
		if lastOther.After(last) {
			r["all_back_s"] = secs(lastOther.Sub(firstDisc))
		} else {
			r["all_back_s"] = secs(last.Sub(firstDisc))
		}
	}
	if !firstDisc.IsZero() && !last.IsZero() {
		r["moved_s"] = secs(last.Sub(firstDisc)) // from the first disconnection seen (the kill)
		r["since_arm_s"] = secs(last.Sub(armedAt))
	}
	return merge(r, stats())
}

func cmdFire() map[string]interface{} {
	l := live()
	armedOK := waitAll(func() bool {
		for _, s := range l {
			s.mu.Lock()
			w := s.watching
			s.mu.Unlock()
			if !w {
				return false
			}
		}
		return true
	}, "watches arming")
	notArmed := 0
	for _, s := range l {
		s.mu.Lock()
		if !s.watching {
			notArmed++
		}
		s.fired, s.firedAt = 0, time.Time{}
		s.mu.Unlock()
	}
	// the control session may itself have been on the server that died: the clock starts once it
	// is attached again (an answered read), not while go-zookeeper backs off between servers
	var err error
	for i := 0; i < 100; i++ {
		if _, _, err = control.Exists(watched); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t0 := time.Now()
	for i := 0; i < 50 && (i == 0 || err != nil); i++ {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		_, err = control.Set(watched, []byte(strconv.FormatInt(t0.UnixNano(), 10)), -1)
	}
	if err != nil {
		return map[string]interface{}{"cmd": "fire", "ok": false, "error": "setData: " + err.Error()}
	}
	heard := func() (int, int, int, time.Time) {
		got, sessionsHeard, dup := 0, 0, 0
		var last time.Time
		for _, s := range l {
			s.mu.Lock()
			got += s.fired
			if s.fired > 0 {
				sessionsHeard++
				if s.firedAt.After(last) {
					last = s.firedAt
				}
			}
			if s.fired > 1 {
				dup++
			}
			s.mu.Unlock()
		}
		return got, sessionsHeard, dup, last
	}
	ok := waitAll(func() bool { _, n, _, _ := heard(); return n == len(l) }, "notifications")
	got, n, dup, last := heard()
	r := map[string]interface{}{"cmd": "fire", "ok": ok && armedOK, "expected": len(l), "received": got,
		"sessions_notified": n, "sessions_notified_twice": dup, "not_armed_before": notArmed}
	if !last.IsZero() {
		r["all_notified_s"] = secs(last.Sub(t0))
	}
	return merge(r, stats())
}

func cmdAbandon() map[string]interface{} {
	n := 0
	for _, s := range sessions {
		if s.group != "x" {
			continue
		}
		s.dead.Store(true)
		s.mu.Lock()
		if s.net != nil {
			s.net.Close()
		}
		s.mu.Unlock()
		n++
	}
	return map[string]interface{}{"cmd": "abandon", "abandoned": n}
}

func census() (map[string]int, error) {
	names, _, err := control.Children(ephemDir)
	if err != nil {
		return nil, err
	}
	c := map[string]int{"m": 0, "x": 0}
	for _, name := range names {
		c[name[:1]]++
	}
	return c, nil
}

func cmdGone() map[string]interface{} {
	t0 := time.Now()
	var c map[string]int
	var err error
	ok := waitAll(func() bool {
		c2, e := census()
		if e != nil {
			err = e
			return false
		}
		c = c2
		return c["x"] == 0
	}, "expire group's ephemerals to go")
	r := map[string]interface{}{"cmd": "gone", "ok": ok && c != nil, "gone_s": secs(time.Since(t0))}
	if c != nil {
		r["left"] = c
	}
	if err != nil {
		r["last_error"] = err.Error()
	}
	return merge(r, stats())
}

func main() {
	flag.Func("servers", "comma-separated host:port list", func(v string) error {
		servers = strings.Split(v, ",")
		return nil
	})
	flag.DurationVar(&timeout, "timeout", 10*time.Second, "session timeout asked for")
	flag.DurationVar(&deadline, "deadline", 120*time.Second, "bound on every wait")
	flag.IntVar(&expireN, "expire-group", 0, "sessions (the last ones) that abandon will stop")
	flag.Parse()
	if len(servers) == 0 {
		fmt.Fprintln(os.Stderr, "zk_sessions_driver: -servers is required")
		os.Exit(2)
	}
	if err := setup(); err != nil {
		fmt.Fprintln(os.Stderr, "zk_sessions_driver: setup:", err)
		os.Exit(1)
	}
	reply(map[string]interface{}{"cmd": "ready"})
	quit := make(chan struct{})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "open":
			n, err := strconv.Atoi(f[1])
			if err != nil || n <= expireN {
				reply(map[string]interface{}{"cmd": "open", "ok": false, "error": "open N, N > -expire-group"})
				continue
			}
			reply(cmdOpen(n, quit))
		case "arm":
			reply(cmdArm(f[1]))
		case "moved":
			reply(cmdMoved())
		case "fire":
			reply(cmdFire())
		case "abandon":
			reply(cmdAbandon())
		case "gone":
			reply(cmdGone())
		case "census":
			c, err := census()
			if err != nil {
				reply(map[string]interface{}{"cmd": "census", "ok": false, "error": err.Error()})
			} else {
				reply(merge(map[string]interface{}{"cmd": "census", "ok": true, "ephemerals": c}, stats()))
			}
		case "stats":
			reply(merge(map[string]interface{}{"cmd": "stats"}, stats()))
		case "quit":
			close(quit)
			reply(map[string]interface{}{"cmd": "quit"})
			return
		default:
			reply(map[string]interface{}{"cmd": f[0], "ok": false, "error": "unknown command"})
		}
	}
}
