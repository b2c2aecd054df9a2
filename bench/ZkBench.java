// ZkBench: asynchronous ZooKeeper write load generator (closed loop, bounded window).
//
// THIS IS A COPY of ../shared/anchors/zookeeper/ZkBench.java (the ZooKeeper anchor's load
// generator) with one addition: a read mode, `--op get` (async getData of the session's
// znode /zkbench/s<i>, which holds P bytes written before the load starts). Everything else
// (options, windowing, measurement, CPU accounting, JSON) is unchanged, so `--op set`
// measures exactly what the anchor measures. Used by bench/zk_side_by_side.py.
//
// Build (Debian jars):  javac -cp /usr/share/java/zookeeper.jar -d build ZkBench.java
// Run:  java -cp build:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
//         ZkBench --connect 127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813 [options]
//
// Options (defaults in brackets):
//   --connect h:p,h:p,...  all servers of the ensemble (required)
//   --target spread|leader|random   [spread] session i -> server i%n | all -> leader |
//                                   full connect string (client picks one at random)
//   --leader h:p           leader client address (else discovered with the `srvr` 4lw)
//   --sessions C           [8]    ZooKeeper sessions (one TCP connection each)
//   --window W             [32]   max outstanding async requests per session
//   --payload P            [1024] bytes per write
//   --op set|create|get    [set]  setData on /zkbench/s<i> (one znode per session, version -1)
//                                 or create PERSISTENT_SEQUENTIAL /zkbench/seq/n-
//                                 or getData of /zkbench/s<i> (no watch; the znode is created
//                                 with, or set to, the P-byte payload before the load starts;
//                                 a read whose data is not those P bytes counts as an error,
//                                 reported as `bad_reads` and error code -1000)
//   --warmup S             [5]    seconds of load not measured
//   --duration S           [25]   measured seconds (ops completed inside the window)
//   --count N              [0]    if >0: measure exactly N ops (after warmup) instead of a duration
//   --max-seconds S        [300]  hard cap on the whole run; issuing stops when reached
//   --cpu-pids p1,p2,...   []     server PIDs whose CPU use over the window is reported
//   --clk-tck T            [100]  USER_HZ for /proc accounting
//   --label L              [""]   free text copied into the JSON
//   --progress 0|1         [0]    log completed ops per second on stderr
//   --session-timeout MS   [30000] ZooKeeper session timeout requested by each session
// Output: one JSON line on stdout; progress on stderr.
import org.apache.zookeeper.AsyncCallback;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

public class ZkBench {
    static final Map<String, String> opts = new HashMap<>();

    static String opt(String k, String def) { return opts.getOrDefault(k, def); }
    static int optInt(String k, int def) { return Integer.parseInt(opt(k, Integer.toString(def))); }
    static long optLong(String k, long def) { return Long.parseLong(opt(k, Long.toString(def))); }
    static double optDouble(String k, double def) { return Double.parseDouble(opt(k, Double.toString(def))); }

    static void log(String s) { System.err.println("[ZkBench] " + s); }

    // ---- measurement window (System.nanoTime) ----
    static volatile long windowStart = Long.MAX_VALUE;   // completions >= start are measured
    static volatile long windowEnd = Long.MAX_VALUE;     // ... and < end
    static volatile long stopIssuingAt = Long.MAX_VALUE; // issuers stop at this time
    static volatile boolean countMode = false;

    static final class LongList {
        long[] a = new long[1 << 16];
        int n = 0;
        void add(long v) {
            if (n == a.length) a = Arrays.copyOf(a, a.length * 2);
            a[n++] = v;
        }
    }

    static final class Session implements AsyncCallback.StatCallback, AsyncCallback.StringCallback,
            AsyncCallback.DataCallback {
        final int id;
        final String server;
        ZooKeeper zk;
        final Semaphore sem;
        final LongList lat = new LongList();       // ns, completions inside the window; EventThread only
        final AtomicLong measuredOps = new AtomicLong();
        final AtomicLong errors = new AtomicLong();
        final AtomicLong completed = new AtomicLong();
        volatile long lastCompletion = 0;
        long issued = 0;          // issuer thread only
        long quota = Long.MAX_VALUE;
        String path;
        final Map<Integer, Long> errCodes = new ConcurrentHashMap<>();

        Session(int id, String server, int window) {
            this.id = id; this.server = server; this.sem = new Semaphore(window);
        }

        void done(int rc, Object ctx) {
            long now = System.nanoTime();
            long start = (Long) ctx;
            completed.incrementAndGet();
            if (rc != KeeperException.Code.OK.intValue()) {
                errors.incrementAndGet();
                errCodes.merge(rc, 1L, Long::sum);
            } else {
                // duration mode: every op completing inside [windowStart, windowEnd);
                // count mode: every op issued at/after windowStart (the N measured ops)
                boolean measure = countMode ? start >= windowStart : (now >= windowStart && now < windowEnd);
                if (measure) {
                    lat.add(now - start);
                    measuredOps.incrementAndGet();
                    lastCompletion = now;
                }
            }
            sem.release();
        }
        @Override public void processResult(int rc, String p, Object ctx, Stat stat) { done(rc, ctx); }
        @Override public void processResult(int rc, String p, Object ctx, String name) { done(rc, ctx); }
        // --op get: the data must be the payload written before the load
        static byte[] expected;
        static final AtomicLong badReads = new AtomicLong();
        @Override public void processResult(int rc, String p, Object ctx, byte[] data, Stat stat) {
            if (rc == KeeperException.Code.OK.intValue() && !Arrays.equals(data, expected)) {
                badReads.incrementAndGet();
                rc = BAD_READ;
            }
            done(rc, ctx);
        }
        static final int BAD_READ = -1000;
    }

    // ---- four letter words ----
    static String fourLetter(String hostPort, String cmd) {
        String[] hp = hostPort.split(":");
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(hp[0], Integer.parseInt(hp[1])), 3000);
            s.setSoTimeout(3000);
            OutputStream o = s.getOutputStream();
            o.write(cmd.getBytes(StandardCharsets.US_ASCII));
            o.flush();
            InputStream in = s.getInputStream();
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (Exception e) {
            return "";
        }
    }

    static String findLeader(String[] servers) {
        for (String s : servers) {
            String r = fourLetter(s, "srvr");
            if (r.contains("Mode: leader")) return s;
            if (r.contains("Mode: standalone")) return s;
        }
        return null;
    }

    // ---- /proc CPU accounting ----
    static long procTicks(long pid) {
        try {
            String st = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/stat")), StandardCharsets.US_ASCII);
            String[] f = st.substring(st.lastIndexOf(')') + 2).trim().split("\\s+");
            return Long.parseLong(f[11]) + Long.parseLong(f[12]); // utime + stime
        } catch (Exception e) {
            return -1;
        }
    }

    static long[] machineTicks() { // {total, idle, iowait, irq+softirq, steal}
        try {
            for (String line : Files.readAllLines(Paths.get("/proc/stat"))) {
                if (line.startsWith("cpu ")) {
                    String[] f = line.trim().split("\\s+");
                    long total = 0;
                    for (int i = 1; i < f.length && i <= 8; i++) total += Long.parseLong(f[i]); // user..steal
                    return new long[]{total, Long.parseLong(f[4]), Long.parseLong(f[5]),
                            Long.parseLong(f[6]) + Long.parseLong(f[7]), Long.parseLong(f[8])};
                }
            }
        } catch (Exception e) { }
        return new long[]{0, 0, 0, 0, 0};
    }

    static String comm(long pid) { // command line (first 80 chars) or comm
        try {
            String c = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/cmdline")), StandardCharsets.UTF_8).replace('\0', ' ').trim();
            if (c.isEmpty()) c = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/comm")), StandardCharsets.UTF_8).trim();
            return c.length() > 80 ? c.substring(0, 80) : c;
        } catch (Exception e) { return "?"; }
    }

    static final class CpuSnap {
        long[] pids; long[] ticks; long self; long[] machine; long t;
        Map<Long, Long> allTicks = new HashMap<>();   // every process on the box (to spot foreign load)
        static CpuSnap take(long[] pids) {
            CpuSnap c = new CpuSnap();
            c.t = System.nanoTime();
            c.pids = pids;
            c.ticks = new long[pids.length];
            for (int i = 0; i < pids.length; i++) c.ticks[i] = procTicks(pids[i]);
            c.self = procTicks(ProcessHandle.current().pid());
            c.machine = machineTicks();
            java.io.File[] ds = new java.io.File("/proc").listFiles();
            if (ds != null) for (java.io.File d : ds) {
                String n = d.getName();
                if (n.isEmpty() || !Character.isDigit(n.charAt(0))) continue;
                long pid;
                try { pid = Long.parseLong(n); } catch (NumberFormatException e) { continue; }
                long tk = procTicks(pid);
                if (tk >= 0) c.allTicks.put(pid, tk);
            }
            return c;
        }
    }

    static String r2(double v) { return String.format(Locale.ROOT, "%.2f", v); }
    static String r3(double v) { return String.format(Locale.ROOT, "%.3f", v); }

    static String cpuJson(CpuSnap a, CpuSnap b, double clk) {
        double secs = (b.t - a.t) / 1e9;
        StringBuilder sb = new StringBuilder("{");
        double sum = 0;
        StringBuilder per = new StringBuilder("[");
        for (int i = 0; i < a.pids.length; i++) {
            double pct = (a.ticks[i] < 0 || b.ticks[i] < 0) ? -1 : (b.ticks[i] - a.ticks[i]) / clk / secs * 100.0;
            if (pct > 0) sum += pct;
            per.append(i == 0 ? "" : ",").append(r2(pct));
        }
        per.append("]");
        double client = (b.self - a.self) / clk / secs * 100.0;
        long dt = b.machine[0] - a.machine[0];
        int cores = Runtime.getRuntime().availableProcessors();
        double busy = dt > 0 ? 100.0 * (dt - (b.machine[1] - a.machine[1]) - (b.machine[2] - a.machine[2])) / dt : -1;
        double iow = dt > 0 ? 100.0 * (b.machine[2] - a.machine[2]) / dt : -1;
        double irq = dt > 0 ? 100.0 * cores * (b.machine[3] - a.machine[3]) / dt : -1;
        double steal = dt > 0 ? 100.0 * cores * (b.machine[4] - a.machine[4]) / dt : -1;
        // foreign processes: everything except the servers and this client
        Set<Long> mine = new HashSet<>();
        for (long p : a.pids) mine.add(p);
        mine.add(ProcessHandle.current().pid());
        double foreign = 0;
        List<long[]> top = new ArrayList<>();
        for (Map.Entry<Long, Long> e : b.allTicks.entrySet()) {
            Long before = a.allTicks.get(e.getKey());
            if (before == null || mine.contains(e.getKey())) continue;
            long d = e.getValue() - before;
            if (d > 0) { foreign += d / clk / secs * 100.0; top.add(new long[]{d, e.getKey()}); }
        }
        top.sort((x, y) -> Long.compare(y[0], x[0]));
        StringBuilder tops = new StringBuilder("[");
        for (int i = 0; i < Math.min(3, top.size()); i++)
            tops.append(i == 0 ? "" : ",").append(jsonStr(comm(top.get(i)[1]) + "(" + top.get(i)[1] + "):" + r2(top.get(i)[0] / clk / secs * 100.0)));
        tops.append("]");
        sb.append("\"unit\":\"percent of one core\"");
        sb.append(",\"client_pct\":").append(r2(client));
        sb.append(",\"servers_pct\":").append(r2(sum));
        sb.append(",\"per_server_pct\":").append(per);
        sb.append(",\"foreign_procs_pct\":").append(r2(foreign));
        sb.append(",\"foreign_top\":").append(tops);
        sb.append(",\"irq_softirq_pct\":").append(r2(irq));
        sb.append(",\"steal_pct\":").append(r2(steal));
        sb.append(",\"machine_busy_pct_of_all_cores\":").append(r2(busy));
        sb.append(",\"machine_iowait_pct_of_all_cores\":").append(r2(iow));
        sb.append(",\"cores\":").append(cores);
        sb.append("}");
        return sb.toString();
    }

    static double pct(long[] sorted, int n, double q) {
        if (n == 0) return Double.NaN;
        int idx = (int) Math.ceil(q * n) - 1;
        if (idx < 0) idx = 0;
        if (idx >= n) idx = n - 1;
        return sorted[idx] / 1e6;
    }

    static String jsonStr(String s) { return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\""; }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("--")) throw new IllegalArgumentException("bad arg " + a);
            if (i + 1 >= args.length) throw new IllegalArgumentException("missing value for " + a);
            opts.put(a.substring(2), args[++i]);
        }
        String connect = opt("connect", null);
        if (connect == null) { System.err.println("usage: ZkBench --connect h:p,h:p,... [options] (see source header)"); System.exit(2); }
        String[] servers = connect.split(",");
        String target = opt("target", "spread");
        int nSessions = optInt("sessions", 8);
        int window = optInt("window", 32);
        int payloadSize = optInt("payload", 1024);
        String op = opt("op", "set");
        double warmup = optDouble("warmup", 5);
        double duration = optDouble("duration", 25);
        long count = optLong("count", 0);
        double maxSeconds = optDouble("max-seconds", 300);
        double clk = optDouble("clk-tck", 100);
        String label = opt("label", "");
        int sessionTimeout = optInt("session-timeout", 30000);
        long[] cpuPids = Arrays.stream(opt("cpu-pids", "").split(",")).filter(s -> !s.isEmpty()).mapToLong(Long::parseLong).toArray();
        if (!op.equals("set") && !op.equals("create") && !op.equals("get"))
            throw new IllegalArgumentException("--op set|create|get");
        final boolean isGet = op.equals("get");

        final long t0 = System.nanoTime();
        final long hardDeadline = t0 + (long) (maxSeconds * 1e9);

        String leader = opt("leader", null);
        if (target.equals("leader") && leader == null) {
            leader = findLeader(servers);
            if (leader == null) { log("could not find leader via srvr"); System.exit(1); }
        }
        if (leader == null) leader = findLeader(servers);

        byte[] payload = new byte[payloadSize];
        new Random(42).nextBytes(payload);
        Session.expected = payload;

        // ---- connect sessions ----
        List<Session> sessions = new ArrayList<>();
        for (int i = 0; i < nSessions; i++) {
            String srv;
            switch (target) {
                case "leader": srv = leader; break;
                case "random": srv = connect; break;
                case "spread": srv = servers[i % servers.length]; break;
                default: throw new IllegalArgumentException("--target spread|leader|random");
            }
            Session s = new Session(i, srv, window);
            CountDownLatch connected = new CountDownLatch(1);
            s.zk = new ZooKeeper(srv, sessionTimeout, (WatchedEvent e) -> {
                if (e.getState() == Watcher.Event.KeeperState.SyncConnected) connected.countDown();
                else if (e.getState() == Watcher.Event.KeeperState.Disconnected || e.getState() == Watcher.Event.KeeperState.Expired)
                    log("session " + s.id + " state " + e.getState());
            });
            if (!connected.await(30, TimeUnit.SECONDS)) { log("session " + i + " could not connect to " + srv); System.exit(1); }
            sessions.add(s);
        }
        ZooKeeper admin = sessions.get(0).zk;
        try { admin.create("/zkbench", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT); }
        catch (KeeperException.NodeExistsException e) { }
        if (op.equals("create")) {
            try { admin.create("/zkbench/seq", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT); }
            catch (KeeperException.NodeExistsException e) { }
        }
        for (Session s : sessions) {
            s.path = op.equals("create") ? "/zkbench/seq/n-" : "/zkbench/s" + s.id;
            if (op.equals("set") || isGet) {
                try { admin.create(s.path, payload, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT); }
                catch (KeeperException.NodeExistsException e) { if (isGet) admin.setData(s.path, payload, -1); }
            }
        }
        Map<String, Integer> perServer = new TreeMap<>();
        for (Session s : sessions) perServer.merge(s.server, 1, Integer::sum);
        log("connected " + nSessions + " sessions; target=" + target + " leader=" + leader + " perServer=" + perServer);

        if (isGet) {
            // each session reads from its own server: make sure that server has seen the writes above
            for (Session s : sessions) {
                CountDownLatch synced = new CountDownLatch(1);
                s.zk.sync(s.path, (rc, p, ctx) -> synced.countDown(), null);
                if (!synced.await(30, TimeUnit.SECONDS)) { log("session " + s.id + ": sync timed out"); System.exit(1); }
            }
        }

        // ---- schedule ----
        countMode = count > 0;
        long now = System.nanoTime();
        long ws = now + (long) (warmup * 1e9);
        if (countMode) {
            long per = count / nSessions, rem = count % nSessions;
            for (Session s : sessions) s.quota = per + (s.id < rem ? 1 : 0);
            // in count mode warmup ops are extra; quota applies to ops issued after windowStart
        } else {
            windowEnd = ws + (long) (duration * 1e9);
            stopIssuingAt = windowEnd;
        }
        windowStart = ws;
        if (hardDeadline < stopIssuingAt) stopIssuingAt = hardDeadline;

        final boolean isSet = op.equals("set");
        List<Thread> issuers = new ArrayList<>();
        for (Session s : sessions) {
            Thread t = new Thread(() -> {
                long measuredIssued = 0;
                try {
                    while (true) {
                        if (!s.sem.tryAcquire(200, TimeUnit.MILLISECONDS)) {
                            if (System.nanoTime() >= stopIssuingAt) break;
                            continue;
                        }
                        long st = System.nanoTime();
                        if (st >= stopIssuingAt) { s.sem.release(); break; }
                        if (countMode && st >= windowStart) {
                            if (measuredIssued >= s.quota) { s.sem.release(); break; }
                            measuredIssued++;
                        }
                        s.issued++;
                        if (isSet) s.zk.setData(s.path, payload, -1, s, st);
                        else if (isGet) s.zk.getData(s.path, false, (AsyncCallback.DataCallback) s, st);
                        else s.zk.create(s.path, payload, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT_SEQUENTIAL, s, st);
                    }
                } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
            }, "issuer-" + s.id);
            t.setDaemon(true);
            issuers.add(t);
        }
        for (Thread t : issuers) t.start();
        if (optInt("progress", 0) > 0) {   // per-second completed ops on stderr
            Thread pr = new Thread(() -> {
                long prev = 0, sec = 0;
                try {
                    while (true) {
                        Thread.sleep(1000);
                        long c = 0;
                        for (Session s : sessions) c += s.completed.get();
                        log("t=" + (++sec) + "s completed/s=" + (c - prev));
                        prev = c;
                    }
                } catch (InterruptedException e) { }
            }, "progress");
            pr.setDaemon(true);
            pr.start();
        }

        // ---- CPU snapshots at window start / end ----
        long sleepNs = windowStart - System.nanoTime();
        if (sleepNs > 0) Thread.sleep(sleepNs / 1_000_000, (int) (sleepNs % 1_000_000));
        CpuSnap cpuA = CpuSnap.take(cpuPids);
        log("warmup done, measuring");
        CpuSnap cpuB;
        long measuredEnd;
        if (!countMode) {
            sleepNs = windowEnd - System.nanoTime();
            if (sleepNs > 0) Thread.sleep(sleepNs / 1_000_000, (int) (sleepNs % 1_000_000));
            cpuB = CpuSnap.take(cpuPids);
            measuredEnd = windowEnd;
        } else {
            for (Thread t : issuers) t.join(Math.max(1, (hardDeadline - System.nanoTime()) / 1_000_000));
            cpuB = null;
            measuredEnd = 0;
        }
        // drain: wait (bounded) for all outstanding requests to complete
        long drainDeadline = Math.min(System.nanoTime() + 30_000_000_000L, hardDeadline + 30_000_000_000L);
        for (Thread t : issuers) t.join(Math.max(1, (drainDeadline - System.nanoTime()) / 1_000_000));
        boolean drained = false;
        while (System.nanoTime() < drainDeadline) {
            boolean all = true;
            for (Session s : sessions) if (s.completed.get() < s.issued) { all = false; break; }
            if (all) { drained = true; break; }
            Thread.sleep(5);
        }
        if (countMode) {
            for (Session s : sessions) measuredEnd = Math.max(measuredEnd, s.lastCompletion);
            cpuB = CpuSnap.take(cpuPids);
        }

        // ---- results ----
        long ops = 0, errors = 0, issued = 0;
        int total = 0;
        for (Session s : sessions) { ops += s.measuredOps.get(); errors += s.errors.get(); issued += s.issued; total += s.lat.n; }
        long[] all = new long[total];
        int k = 0;
        Map<Integer, Long> errCodes = new TreeMap<>();
        for (Session s : sessions) {
            System.arraycopy(s.lat.a, 0, all, k, s.lat.n); k += s.lat.n;
            s.errCodes.forEach((c, v) -> errCodes.merge(c, v, Long::sum));
        }
        Arrays.sort(all);
        double secs = (measuredEnd - windowStart) / 1e9;
        double mean = 0;
        for (long v : all) mean += v;
        mean = total > 0 ? mean / total / 1e6 : Double.NaN;

        StringBuilder j = new StringBuilder("{");
        j.append("\"client\":\"java\"");
        j.append(",\"label\":").append(jsonStr(label));
        j.append(",\"op\":").append(jsonStr(op));
        j.append(",\"target\":").append(jsonStr(target));
        j.append(",\"servers\":").append(servers.length);
        j.append(",\"leader\":").append(jsonStr(leader == null ? "" : leader));
        j.append(",\"sessions\":").append(nSessions);
        j.append(",\"window\":").append(window);
        j.append(",\"payload\":").append(payloadSize);
        j.append(",\"warmup_s\":").append(warmup);
        j.append(",\"measured_s\":").append(r3(secs));
        j.append(",\"ops\":").append(ops);
        j.append(",\"ops_per_s\":").append(r2(ops / secs));
        j.append(",\"MB_per_s\":").append(r3(ops * (double) payloadSize / secs / 1e6));
        j.append(",\"errors\":").append(errors);
        if (!errCodes.isEmpty()) j.append(",\"error_codes\":").append(jsonStr(errCodes.toString()));
        if (isGet) j.append(",\"bad_reads\":").append(Session.badReads.get());
        j.append(",\"issued_total\":").append(issued);
        j.append(",\"drained\":").append(drained);
        long over1s = 0;
        for (int i = total - 1; i >= 0 && all[i] > 1_000_000_000L; i--) over1s++;
        j.append(",\"ops_over_1s\":").append(over1s);
        j.append(",\"lat_ms\":{\"p50\":").append(r3(pct(all, total, 0.50)))
         .append(",\"p99\":").append(r3(pct(all, total, 0.99)))
         .append(",\"p999\":").append(r3(pct(all, total, 0.999)))
         .append(",\"max\":").append(r3(total > 0 ? all[total - 1] / 1e6 : Double.NaN))
         .append(",\"mean\":").append(r3(mean)).append("}");
        // per session: a server that answers slower shows here, hidden in the overall percentiles
        j.append(",\"per_session\":[");
        for (int i = 0; i < sessions.size(); i++) {
            Session s = sessions.get(i);
            long[] mine = Arrays.copyOf(s.lat.a, s.lat.n);
            Arrays.sort(mine);
            if (i > 0) j.append(',');
            j.append("{\"server\":").append(jsonStr(s.server)).append(",\"ops\":").append(s.lat.n)
             .append(",\"p50\":").append(r3(pct(mine, mine.length, 0.50)))
             .append(",\"p99\":").append(r3(pct(mine, mine.length, 0.99))).append('}');
        }
        j.append(']');
        j.append(",\"cpu\":").append(cpuJson(cpuA, cpuB, clk));
        j.append("}");
        System.out.println(j);
        System.out.flush();

        for (Session s : sessions) { try { s.zk.close(2000); } catch (Exception e) { } }
        System.exit(0);
    }
}
