// ZooKeeper's own parser on a /zookeeper/config text read from stdin: the dynamic-config
// parser a ZooKeeper server uses (QuorumPeerConfig.parseDynamicConfig, which builds a QuorumMaj
// as Curator's EnsembleTracker does) and the one zkCli's `config -c` uses
// (ConfigUtils.getClientConfigStr). Prints, for tests/server/test_zk_config_clients.py:
//   version <hex>
//   server <id> <toString as ZooKeeper writes it back>   (one a member)
//   client <id> <host:port of its client address, or none>
//   clientconfig <getClientConfigStr's answer>
// and exits 1 with "refused <exception>" if the text does not parse.
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.zookeeper.server.quorum.QuorumPeer;
import org.apache.zookeeper.server.quorum.QuorumPeerConfig;
import org.apache.zookeeper.server.quorum.flexible.QuorumVerifier;
import org.apache.zookeeper.server.util.ConfigUtils;

public final class ZkConfigParse {
    private ZkConfigParse() {}

    public static void main(String[] args) throws Exception {
        InputStream in = System.in;
        byte[] data = in.readAllBytes();
        String text = new String(data, StandardCharsets.UTF_8);
        Properties props = new Properties();
        props.load(new ByteArrayInputStream(data));
        QuorumVerifier qv;
        try {
            // electionAlg 3 (the only one), warnings on, not the backward-compatible static form
            qv = QuorumPeerConfig.parseDynamicConfig(props, 3, true, false, null);
        } catch (Exception e) {
            System.out.println("refused " + e);
            System.exit(1);
            return;
        }
        System.out.println("version " + Long.toHexString(qv.getVersion()));
        Map<Long, QuorumPeer.QuorumServer> members = new TreeMap<>(qv.getAllMembers());
        for (Map.Entry<Long, QuorumPeer.QuorumServer> e : members.entrySet()) {
            QuorumPeer.QuorumServer qs = e.getValue();
            System.out.println("server " + e.getKey() + " " + qs);
            String client = qs.clientAddr == null ? "none"
                : qs.clientAddr.getHostString() + ":" + qs.clientAddr.getPort();
            System.out.println("client " + e.getKey() + " " + client);
        }
        System.out.println("clientconfig " + ConfigUtils.getClientConfigStr(text));
    }
}
