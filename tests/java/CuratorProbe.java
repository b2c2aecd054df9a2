// Two Curator 5.x clients (Debian's libcurator-*-java) against a ZooKeeper-port
// ensemble, driven a command a line from stdin by tests/server/test_zk_config_clients.py,
// one answer line a command on stdout. Each client has the EnsembleTracker Curator builds
// by default, a LeaderLatch and an InterProcessMutex on shared paths. Every wait here has
// a deadline; the test reads the answer and decides. Commands:
//   conn ADDR,ADDR,...   wait until both clients' current connection string holds exactly
//                        these addresses: "conn ok <A's string>" or "conn timeout <A> | <B>"
//   leader               wait until exactly one latch leads, both agreeing on its id, both
//                        clients connected: "leader <A|B>" or "leader timeout <state>"
//   acquire X SECONDS    client X (A or B) takes the mutex: "acquire X true|false"
//   holds X              "holds X <isAcquiredInThisProcess> <lock nodes under the mutex path>"
//   release X            "release X"
//   quit                 close everything: "bye"
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorProbe {
    private static final long WAIT_MS = 60_000;
    private static final String LATCH = "/probe/latch";
    private static final String MUTEX = "/probe/mutex";

    private CuratorProbe() {}

    private static CuratorFramework client(String connect) throws InterruptedException {
        CuratorFramework c = CuratorFrameworkFactory.builder()
            .connectString(connect)
            .sessionTimeoutMs(15_000)
            .connectionTimeoutMs(5_000)
            .retryPolicy(new ExponentialBackoffRetry(100, 10, 2_000))
            .build();  // ensembleTracker(true) is the default
        c.start();
        if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected to " + connect + " within 30 s");
        }
        return c;
    }

    private static Set<String> addresses(String connect) {
        return new HashSet<>(Arrays.asList(connect.split(",")));
    }

    public static void main(String[] args) throws Exception {
        CuratorFramework[] clients = {client(args[0]), client(args[0])};
        String[] names = {"A", "B"};
        LeaderLatch[] latches = new LeaderLatch[2];
        InterProcessMutex[] mutexes = new InterProcessMutex[2];
        for (int i = 0; i < 2; i++) {
            latches[i] = new LeaderLatch(clients[i], LATCH, names[i]);
            latches[i].start();
            mutexes[i] = new InterProcessMutex(clients[i], MUTEX);
        }
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            int x = w.length > 1 && w[1].equals("B") ? 1 : 0;
            String answer;
            switch (w[0]) {
                case "conn": {
                    Set<String> want = addresses(w[1]);
                    long end = System.currentTimeMillis() + WAIT_MS;
                    String a = "", b = "";
                    boolean ok = false;
                    while (System.currentTimeMillis() < end) {
                        a = clients[0].getZookeeperClient().getCurrentConnectionString();
                        b = clients[1].getZookeeperClient().getCurrentConnectionString();
                        if (addresses(a).equals(want) && addresses(b).equals(want)) {
                            ok = true;
                            break;
                        }
                        Thread.sleep(50);
                    }
                    answer = ok ? "conn ok " + a : "conn timeout " + a + " | " + b;
                    break;
                }
                case "leader": {
                    long end = System.currentTimeMillis() + WAIT_MS;
                    answer = null;
                    String state = "";
                    while (answer == null && System.currentTimeMillis() < end) {
                        boolean a = latches[0].hasLeadership(), b = latches[1].hasLeadership();
                        boolean connected = clients[0].getZookeeperClient().isConnected()
                            && clients[1].getZookeeperClient().isConnected();
                        state = "A=" + a + " B=" + b + " connected=" + connected;
                        if (a != b && connected) {
                            String who = a ? "A" : "B";
                            // both agree who leads (the latch's node order on the server)
                            try {
                                if (latches[0].getLeader().getId().equals(who)
                                        && latches[1].getLeader().getId().equals(who)) {
                                    answer = "leader " + who;
                                }
                            } catch (Exception e) {
                                state += " " + e;
                            }
                        }
                        if (answer == null) {
                            Thread.sleep(50);
                        }
                    }
                    if (answer == null) {
                        answer = "leader timeout " + state;
                    }
                    break;
                }
                case "acquire":
                    answer = "acquire " + names[x] + " " + mutexes[x].acquire(Long.parseLong(w[2]), TimeUnit.SECONDS);
                    break;
                case "holds": {
                    List<String> nodes = clients[x].getChildren().forPath(MUTEX);
                    answer = "holds " + names[x] + " " + mutexes[x].isAcquiredInThisProcess() + " " + nodes.size();
                    break;
                }
                case "release":
                    mutexes[x].release();
                    answer = "release " + names[x];
                    break;
                case "quit":
                    for (int i = 0; i < 2; i++) {
                        latches[i].close();
                        clients[i].close();
                    }
                    System.out.println("bye");
                    System.out.flush();
                    return;
                default:
                    answer = "unknown " + line;
            }
            System.out.println(answer);
            System.out.flush();
        }
    }
}
