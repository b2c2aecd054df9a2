"""Coming over from ZooKeeper and going back: ``zabd import-zookeeper``
reads a ZooKeeper data directory into zabd data directories, ``zabd
export-zookeeper`` writes a zabd state as a snapshot ZooKeeper loads. The
formats are ZooKeeper's (``zabd.zk.datadir``); the tree is zabd's own
(``zabd.zk.tree``), so both ways keep every Stat field, ACL and session."""
