use super::*;

#[test]
fn each_replica_role_is_counted_under_the_label_of_the_same_word() {
    let table = [
        (ReplicaRole::Active, CoordinationRole::Active),
        (ReplicaRole::Standby, CoordinationRole::Standby),
        (ReplicaRole::Unavailable, CoordinationRole::Unavailable),
        (ReplicaRole::Latched, CoordinationRole::Latched),
    ];
    for (role, label) in table {
        assert_eq!(role_label(role), label, "{role}");
        assert_eq!(role.as_str(), label.as_str(), "{role}");
    }
    // Both sets are whole: every role has a row, and every label is some role's.
    assert_eq!(table.map(|(r, _)| r), ReplicaRole::ALL);
    assert_eq!(table.map(|(_, l)| l), CoordinationRole::ALL);
}
