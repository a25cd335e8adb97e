//! A data directory belongs to the node id it was first opened with: raft
//! state and write-log extents are named by the id, so opening it as
//! another node is refused with both ids named.

use duet_cluster_store::{Store, StoreError};

#[test]
fn a_data_directory_keeps_its_node_id() {
    let tmp = tempfile::tempdir().unwrap();
    Store::open(tmp.path(), 3).unwrap().shutdown();
    // The same id opens again.
    Store::open(tmp.path(), 3).unwrap().shutdown();
    match Store::open(tmp.path(), 4) {
        Err(e @ StoreError::WrongNode { stored: 3, configured: 4 }) => {
            let text = e.to_string();
            assert!(text.contains("belongs to node 3") && text.contains("node_id is 4"), "{text}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a node-3 directory opened as node 4"),
    }
    // Refusing changed nothing: it still opens as node 3.
    Store::open(tmp.path(), 3).unwrap().shutdown();
}
