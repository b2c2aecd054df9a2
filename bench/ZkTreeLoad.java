// ZkTreeLoad: builds the deterministic znode tree of bench/zk_memory.py in a ZooKeeper server.
//
// Build:  javac -implicit:none -cp /usr/share/java/zookeeper.jar -d BUILD bench/ZkTreeLoad.java
// Run:    java -cp BUILD:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
//           ZkTreeLoad --connect 127.0.0.1:PORT [--znodes 1000000] [--fanout 1000] [--data-bytes 100]
//                      [--sessions 4] [--window 200] [--max-seconds 900]
//
// Tree (bench/zk_memory.py builds exactly the same one for zabd):
//   /m                      no data
//   /m/p%04d                parents 0 .. ceil(znodes/fanout)-1, no data
//   /m/p%04d/n%06d          leaf k = parent*fanout + child, k < znodes, data-bytes bytes:
//                           byte j = (((k*31) & 0xFF) + j) & 0xFF   (distinct per znode, deterministic)
// All persistent, OPEN_ACL_UNSAFE. Parents go first, then the leaves with async creates,
// at most `window` outstanding per session; session s creates the leaves of the parents
// p with p % sessions == s. Stops issuing at --max-seconds. Any error -> exit 1.
// Output: one JSON line on stdout.
import org.apache.zookeeper.AsyncCallback;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public final class ZkTreeLoad {
    static final AtomicLong done = new AtomicLong();
    static final AtomicLong errors = new AtomicLong();
    static volatile String firstError = null;

    static final class Cb implements AsyncCallback.StringCallback {
        final Semaphore sem;
        Cb(Semaphore sem) { this.sem = sem; }
        @Override public void processResult(int rc, String path, Object ctx, String name) {
            if (rc != KeeperException.Code.OK.intValue()) {
                if (errors.incrementAndGet() == 1) firstError = path + ": " + KeeperException.Code.get(rc);
            }
            done.incrementAndGet();
            sem.release();
        }
    }

    static byte[] leafData(long k, int n) {
        byte[] b = new byte[n];
        int off = (int) ((k * 31) & 0xFF);
        for (int j = 0; j < n; j++) b[j] = (byte) ((off + j) & 0xFF);
        return b;
    }

    static void log(String s) { System.err.println("[ZkTreeLoad] " + s); }

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) throw new IllegalArgumentException("bad arg " + args[i]);
            o.put(args[i].substring(2), args[i + 1]);
        }
        String connect = o.get("connect");
        if (connect == null) { log("usage: ZkTreeLoad --connect host:port [options] (see source header)"); System.exit(2); }
        final long znodes = Long.parseLong(o.getOrDefault("znodes", "1000000"));
        final int fanout = Integer.parseInt(o.getOrDefault("fanout", "1000"));
        final int dataBytes = Integer.parseInt(o.getOrDefault("data-bytes", "100"));
        final int nSessions = Integer.parseInt(o.getOrDefault("sessions", "4"));
        final int window = Integer.parseInt(o.getOrDefault("window", "200"));
        final double maxSeconds = Double.parseDouble(o.getOrDefault("max-seconds", "900"));
        final long parents = (znodes + fanout - 1) / fanout;
        if (parents > 10000 || fanout > 1000000) throw new IllegalArgumentException("path widths: parents <= 10000, fanout <= 1000000");
        final long deadline = System.nanoTime() + (long) (maxSeconds * 1e9);

        List<ZooKeeper> zks = new ArrayList<>();
        for (int i = 0; i < nSessions; i++) {
            CountDownLatch up = new CountDownLatch(1);
            ZooKeeper zk = new ZooKeeper(connect, 30000, (WatchedEvent e) -> {
                if (e.getState() == Watcher.Event.KeeperState.SyncConnected) up.countDown();
                else if (e.getState() != Watcher.Event.KeeperState.Closed) log("session state " + e.getState());
            });
            if (!up.await(30, TimeUnit.SECONDS)) { log("could not connect to " + connect); System.exit(1); }
            zks.add(zk);
        }
        final byte[] empty = new byte[0];
        final long t0 = System.nanoTime();
        zks.get(0).create("/m", empty, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);

        // parents, async on session 0, then wait for all of them
        Semaphore psem = new Semaphore(window);
        Cb pcb = new Cb(psem);
        for (long p = 0; p < parents; p++) {
            psem.acquire();
            zks.get(0).create(String.format(Locale.ROOT, "/m/p%04d", p), empty, ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT, pcb, null);
        }
        if (!psem.tryAcquire(window, 120, TimeUnit.SECONDS)) { log("parents did not complete"); System.exit(1); }
        psem.release(window);
        if (errors.get() > 0) { log("parent create failed: " + firstError); System.exit(1); }

        // leaves: one issuer thread per session
        List<Thread> threads = new ArrayList<>();
        List<Semaphore> sems = new ArrayList<>();
        final AtomicLong issued = new AtomicLong();
        for (int s = 0; s < nSessions; s++) {
            final int sid = s;
            final ZooKeeper zk = zks.get(s);
            final Semaphore sem = new Semaphore(window);
            sems.add(sem);
            final Cb cb = new Cb(sem);
            Thread t = new Thread(() -> {
                try {
                    for (long p = sid; p < parents; p += nSessions) {
                        for (long c = 0; c < fanout; c++) {
                            long k = p * fanout + c;
                            if (k >= znodes) break;
                            while (!sem.tryAcquire(200, TimeUnit.MILLISECONDS)) {
                                if (System.nanoTime() > deadline) return;
                            }
                            if (System.nanoTime() > deadline || errors.get() > 0) { sem.release(); return; }
                            zk.create(String.format(Locale.ROOT, "/m/p%04d/n%06d", p, c), leafData(k, dataBytes),
                                    ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT, cb, null);
                            issued.incrementAndGet();
                        }
                    }
                } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
            }, "issuer-" + s);
            t.setDaemon(true);
            threads.add(t);
            t.start();
        }
        long lastLog = System.nanoTime();
        for (Thread t : threads) {
            while (t.isAlive()) {
                t.join(1000);
                if (System.nanoTime() - lastLog > 10_000_000_000L) {
                    lastLog = System.nanoTime();
                    log(String.format(Locale.ROOT, "%d creates done, %.0f s", done.get(), (lastLog - t0) / 1e9));
                }
            }
        }
        // drain: every session's semaphore back to full
        for (Semaphore sem : sems) {
            long left = Math.max(1, (deadline - System.nanoTime()) / 1_000_000) + 30_000;
            if (!sem.tryAcquire(window, left, TimeUnit.MILLISECONDS)) { log("outstanding creates did not drain"); System.exit(1); }
        }
        final double secs = (System.nanoTime() - t0) / 1e9;
        for (ZooKeeper zk : zks) zk.close();
        long leaves = issued.get();
        boolean complete = leaves == znodes && errors.get() == 0;
        System.out.println(String.format(Locale.ROOT,
                "{\"leaves\":%d,\"parents\":%d,\"creates\":%d,\"errors\":%d,\"first_error\":%s,\"seconds\":%.3f,\"creates_per_s\":%.1f,\"complete\":%b}",
                leaves, parents, leaves + parents + 1, errors.get(),
                firstError == null ? "null" : "\"" + firstError.replace("\"", "'") + "\"",
                secs, (leaves + parents + 1) / secs, complete));
        System.exit(complete ? 0 : 1);
    }
}
