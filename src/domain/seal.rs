//! The hashes that seal audit records (spec `audit-proof.md`): each
//! record's leaf, the RFC 9162 §2.1 Merkle Tree Hash over a segment's
//! leaves with its inclusion proofs, and the seal hash that chains one
//! seal to the one before. Pure functions; the sealer, the verifier and
//! the proof route build on them.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::time::Timestamp;

/// A SHA-256 value.
pub type Hash = [u8; 32];

/// The version of the leaf object [`Leaf`] (its field `v`).
pub const LEAF_VERSION: u32 = 1;

/// `SHA-256(0x00 ‖ data)`: the hash of a leaf (RFC 9162 §2.1.1).
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

/// `SHA-256(0x01 ‖ left ‖ right)`: the hash of an interior node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The largest power of two strictly below `n` (`n` ≥ 2).
fn split(n: usize) -> usize {
    debug_assert!(n >= 2);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// The Merkle Tree Hash of `leaves` (each already a [`leaf_hash`]): the
/// tree splits at the largest power of two below its size, and a last
/// leaf is never duplicated. The empty tree's hash is `SHA-256("")`.
pub fn merkle_root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&merkle_root(&leaves[..k]), &merkle_root(&leaves[k..]))
        }
    }
}

/// The audit path of leaf `index` in the tree of `leaves` (RFC 9162
/// §2.1.3.1), from the leaf's sibling up; `None` when `index` is out of
/// range.
pub fn inclusion_path(leaves: &[Hash], index: usize) -> Option<Vec<Hash>> {
    if index >= leaves.len() {
        return None;
    }
    let mut path = Vec::new();
    let (mut lo, mut hi, mut at) = (0, leaves.len(), index);
    // Walk down from the root, noting the sibling subtree at each split;
    // the path lists them from the bottom up.
    while hi - lo > 1 {
        let k = split(hi - lo);
        if at < k {
            path.push(merkle_root(&leaves[lo + k..hi]));
            hi = lo + k;
        } else {
            path.push(merkle_root(&leaves[lo..lo + k]));
            lo += k;
            at -= k;
        }
    }
    path.reverse();
    Some(path)
}

/// True when `path` proves that `leaf` is leaf `index` of a tree of `size`
/// leaves whose hash is `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(leaf: &Hash, index: u64, size: u64, path: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut fnode, mut snode) = (index, size - 1);
    let mut r = *leaf;
    for p in path {
        if snode == 0 {
            return false;
        }
        if fnode & 1 == 1 || fnode == snode {
            r = node_hash(p, &r);
            if fnode & 1 == 0 {
                while fnode & 1 == 0 && fnode != 0 {
                    fnode >>= 1;
                    snode >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fnode >>= 1;
        snode >>= 1;
    }
    snode == 0 && r == *root
}

/// The leaf object `L` of one audit record: its fields in fixed text forms
/// (timestamps as Writ stores them, absent values `null`), serialized as
/// RFC 8785 canonical JSON before hashing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leaf {
    pub v: u32,
    pub call_id: i64,
    pub called_at: String,
    pub via: String,
    pub agent_login: String,
    pub token_id: Option<i64>,
    pub tool: String,
    pub repository: Option<String>,
    pub decision: String,
    pub grant_rule_id: Option<String>,
    pub reason: String,
    pub rpc_id: Option<String>,
    pub request_id: Option<String>,
    pub arg_names: Vec<String>,
    pub native_status: Option<i64>,
    pub error_code: Option<String>,
    pub completed_at: Option<String>,
}

impl Leaf {
    /// `JCS(L)`: the bytes the leaf hash covers.
    pub fn canonical_json(&self) -> String {
        serde_jcs::to_string(self).expect("a leaf object always serializes")
    }

    /// The record's leaf hash, `SHA-256(0x00 ‖ JCS(L))`.
    pub fn hash(&self) -> Hash {
        leaf_hash(self.canonical_json().as_bytes())
    }
}

/// The fields of a seal that its hash covers (`seal_hash` and `signature`
/// excluded): positions `first..=last` of the sealing order, their count
/// and Merkle root, the previous seal's hash (`None` for the first seal),
/// when, and the signing key's id if one signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealFields {
    pub seq: i64,
    pub first: i64,
    pub last: i64,
    pub count: i64,
    pub merkle_root: String,
    pub prev_seal_hash: Option<String>,
    pub sealed_at: String,
    pub key_id: Option<String>,
}

impl SealFields {
    /// `seal_hash = SHA-256(JCS(fields))`, the raw 32 bytes an Ed25519
    /// signature signs.
    pub fn hash(&self) -> Hash {
        let json = serde_jcs::to_string(self).expect("seal fields always serialize");
        Sha256::digest(json.as_bytes()).into()
    }

    /// The seal's fields for `leaves` following the seal `prev` (its
    /// `seq`, `last` and hash), or the first seal when `None`.
    pub fn next(
        prev: Option<(i64, i64, &Hash)>,
        leaves: &[Hash],
        sealed_at: &str,
        key_id: Option<&str>,
    ) -> SealFields {
        let (seq, first, prev_seal_hash) = match prev {
            Some((seq, last, hash)) => (seq + 1, last + 1, Some(hex::encode(hash))),
            None => (1, 1, None),
        };
        let count = i64::try_from(leaves.len()).expect("a segment fits in i64");
        SealFields {
            seq,
            first,
            last: first + count - 1,
            count,
            merkle_root: hex::encode(merkle_root(leaves)),
            prev_seal_hash,
            sealed_at: sealed_at.to_owned(),
            key_id: key_id.map(str::to_owned),
        }
    }
}

/// Whether a record may be sealed (spec `audit-proof.md`): its outcome is
/// written, or it was called more than `grace_seconds` before `now` (its
/// call died, and it is sealed as it is). A `called_at` that does not parse
/// cannot age, so such a record is final at once.
pub fn is_final(has_outcome: bool, called_at: &str, now: Timestamp, grace_seconds: i64) -> bool {
    has_outcome
        || Timestamp::parse_text(called_at).is_none_or(|at| at.plus_seconds(grace_seconds) < now)
}

/// The id of an Ed25519 public key: the first 16 hex digits of its
/// SHA-256.
pub fn key_id(public_key: &[u8; 32]) -> String {
    hex::encode(Sha256::digest(public_key))[..16].to_owned()
}

/// An Ed25519 signature over the raw 32 bytes of `seal_hash`, by the key
/// whose 32-byte secret seed is `seed`.
pub fn sign(seed: &[u8; 32], seal_hash: &Hash) -> [u8; 64] {
    use ed25519_dalek::Signer;
    ed25519_dalek::SigningKey::from_bytes(seed)
        .sign(seal_hash)
        .to_bytes()
}

/// The public key of the secret seed `seed`.
pub fn public_key(seed: &[u8; 32]) -> [u8; 32] {
    ed25519_dalek::SigningKey::from_bytes(seed)
        .verifying_key()
        .to_bytes()
}

/// True when `signature` is the key `public_key`'s Ed25519 signature of
/// `seal_hash` (strict verification: no malleable encodings).
pub fn verify_signature(public_key: &[u8; 32], seal_hash: &Hash, signature: &[u8; 64]) -> bool {
    ed25519_dalek::VerifyingKey::from_bytes(public_key).is_ok_and(|key| {
        key.verify_strict(seal_hash, &ed25519_dalek::Signature::from_bytes(signature))
            .is_ok()
    })
}

/// `N` bytes written as hex (a hash, key or signature), or `None` when the
/// text is not exactly that.
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    hex::decode(text).ok()?.try_into().ok()
}

/// The seal before the one checked: its number, last position and hash.
#[derive(Debug, Clone, Copy)]
pub struct Prev<'a> {
    pub seq: i64,
    pub last: i64,
    pub seal_hash: &'a str,
}

/// What is wrong with a seal's own fields, if anything: its number after
/// `prev` (`None`: it is the first seal), its `seal_hash`, its link to
/// `prev`, its positions, and its signature, checked with the hex public
/// key that `key` lists under its key id. Its leaves are the caller's.
pub fn seal_problem(
    prev: Option<Prev<'_>>,
    fields: &SealFields,
    seal_hash: &str,
    signature: Option<&str>,
    key: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let expected_seq = prev.map_or(1, |p| p.seq + 1);
    if fields.seq != expected_seq {
        return Some(format!("seal {expected_seq} is missing"));
    }
    if hex::encode(fields.hash()) != seal_hash {
        return Some("its seal_hash is not the hash of its fields".into());
    }
    if fields.prev_seal_hash.as_deref() != prev.map(|p| p.seal_hash) {
        return Some("its prev_seal_hash is not the previous seal's hash".into());
    }
    let first = prev.map_or(1, |p| p.last + 1);
    if fields.first != first || fields.count < 1 || fields.last != first + fields.count - 1 {
        return Some("its positions or counts do not follow the previous seal".into());
    }
    let (key_id, signature) = match (&fields.key_id, signature) {
        (None, None) => return None,
        (Some(key_id), Some(signature)) => (key_id, signature),
        _ => return Some("it has a key id without a signature, or one without the other".into()),
    };
    let Some(public) = key(key_id) else {
        return Some(format!("its key {key_id} is not listed"));
    };
    match (from_hex(&public), from_hex(signature), from_hex(seal_hash)) {
        (Some(public), Some(signature), Some(hash))
            if verify_signature(&public, &hash, &signature) =>
        {
            None
        }
        _ => Some(format!("its signature does not verify with key {key_id}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inputs of the Certificate Transparency reference tree (RFC 6962's
    /// test data, reused by RFC 9162 implementations).
    fn ct_leaves() -> Vec<Hash> {
        [
            "",
            "00",
            "10",
            "2021",
            "3031",
            "40414243",
            "5051525354555657",
            "606162636465666768696a6b6c6d6e6f",
        ]
        .iter()
        .map(|d| leaf_hash(&hex::decode(d).unwrap()))
        .collect()
    }

    /// The reference tree's root for each size 0..=8.
    const CT_ROOTS: [&str; 9] = [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];

    #[test]
    fn roots_match_the_reference_tree_at_every_size() {
        let leaves = ct_leaves();
        for (n, root) in CT_ROOTS.iter().enumerate() {
            assert_eq!(hex::encode(merkle_root(&leaves[..n])), *root, "size {n}");
        }
    }

    #[test]
    fn audit_paths_match_the_reference_proofs() {
        let leaves = ct_leaves();
        let cases: [(usize, usize, &[&str]); 3] = [
            (
                0,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                5,
                8,
                &[
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (
                2,
                3,
                &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
            ),
        ];
        for (index, size, want) in cases {
            let path = inclusion_path(&leaves[..size], index).unwrap();
            let got: Vec<String> = path.iter().map(hex::encode).collect();
            assert_eq!(got, want, "leaf {index} of {size}");
            let root = merkle_root(&leaves[..size]);
            assert!(verify_inclusion(
                &leaves[index],
                index as u64,
                size as u64,
                &path,
                &root
            ));
        }
    }

    #[test]
    fn every_leaf_proves_in_every_tree_size_and_nothing_else_does() {
        let leaves: Vec<Hash> = (0u8..40).map(|i| leaf_hash(&[i, i ^ 0x5a])).collect();
        for size in 1..=leaves.len() {
            let tree = &leaves[..size];
            let root = merkle_root(tree);
            for index in 0..size {
                let path = inclusion_path(tree, index).unwrap();
                let (i, n) = (index as u64, size as u64);
                assert!(verify_inclusion(&tree[index], i, n, &path, &root));
                // Another leaf, another index, a changed path, a shorter or
                // longer path: refused. (The size is the seal's, bound to its
                // root: a path can fit another size with the same shape.)
                let other = tree[(index + 1) % size];
                if size > 1 {
                    assert!(!verify_inclusion(&other, i, n, &path, &root));
                    assert!(!verify_inclusion(
                        &tree[index],
                        (i + 1) % n,
                        n,
                        &path,
                        &root
                    ));
                    let mut changed = path.clone();
                    changed[0][0] ^= 1;
                    assert!(!verify_inclusion(&tree[index], i, n, &changed, &root));
                    assert!(!verify_inclusion(&tree[index], i, n, &path[1..], &root));
                }
                let mut longer = path.clone();
                longer.push(root);
                assert!(!verify_inclusion(&tree[index], i, n, &longer, &root));
            }
            assert!(inclusion_path(tree, size).is_none());
            // An index past the tree is never included.
            let n = size as u64;
            assert!(!verify_inclusion(&tree[0], n, n, &[], &root));
        }
    }

    fn leaf() -> Leaf {
        Leaf {
            v: LEAF_VERSION,
            call_id: 7,
            called_at: "2026-12-06T03:00:05.576939Z".to_owned(),
            via: "api".to_owned(),
            agent_login: "builder-bot".to_owned(),
            token_id: Some(1),
            tool: "submit_agent_work_proposal".to_owned(),
            repository: Some("alice/tiny-tracker".to_owned()),
            decision: "allow".to_owned(),
            grant_rule_id: None,
            reason: "native_api".to_owned(),
            rpc_id: None,
            request_id: Some("a16e3551-5084-49dd-a97c-14898ca3fb25".to_owned()),
            arg_names: vec!["body".to_owned(), "title".to_owned()],
            native_status: Some(201),
            error_code: None,
            completed_at: Some("2026-12-06T03:00:05.577984Z".to_owned()),
        }
    }

    #[test]
    fn a_leaf_is_its_canonical_json_with_sorted_keys_and_nulls() {
        assert_eq!(
            leaf().canonical_json(),
            r#"{"agent_login":"builder-bot","arg_names":["body","title"],"call_id":7,"called_at":"2026-12-06T03:00:05.576939Z","completed_at":"2026-12-06T03:00:05.577984Z","decision":"allow","error_code":null,"grant_rule_id":null,"native_status":201,"reason":"native_api","repository":"alice/tiny-tracker","request_id":"a16e3551-5084-49dd-a97c-14898ca3fb25","rpc_id":null,"token_id":1,"tool":"submit_agent_work_proposal","v":1,"via":"api"}"#
        );
        let expected = leaf_hash(leaf().canonical_json().as_bytes());
        assert_eq!(leaf().hash(), expected);
        // Any field changed changes the leaf.
        let mut changed = leaf();
        changed.native_status = Some(200);
        assert_ne!(changed.hash(), leaf().hash());
    }

    #[test]
    fn seals_chain_by_position_and_hash() {
        let leaves = ct_leaves();
        let first = SealFields::next(None, &leaves[..3], "2026-12-06T03:00:00.000000Z", None);
        assert_eq!(
            (first.seq, first.first, first.last, first.count),
            (1, 1, 3, 3)
        );
        assert_eq!(first.merkle_root, CT_ROOTS[3]);
        assert_eq!(first.prev_seal_hash, None);
        let hash = first.hash();
        let second = SealFields::next(
            Some((first.seq, first.last, &hash)),
            &leaves[3..],
            "2026-12-06T03:00:10.000000Z",
            Some("k1"),
        );
        assert_eq!(
            (second.seq, second.first, second.last, second.count),
            (2, 4, 8, 5)
        );
        assert_eq!(
            second.prev_seal_hash.as_deref(),
            Some(hex::encode(hash).as_str())
        );
        // The hash covers every field.
        let json = serde_jcs::to_string(&second).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"count":5,"first":4,"key_id":"k1","last":8,"merkle_root":"{}","prev_seal_hash":"{}","sealed_at":"2026-12-06T03:00:10.000000Z","seq":2}}"#,
                second.merkle_root,
                hex::encode(hash)
            )
        );
        let mut changed = second.clone();
        changed.sealed_at = "2026-12-06T03:00:11.000000Z".to_owned();
        assert_ne!(changed.hash(), second.hash());
    }

    /// A record is final once it has its outcome, or once the grace has
    /// passed since its call without one.
    #[test]
    fn a_record_is_final_with_its_outcome_or_after_the_grace() {
        let now = Timestamp::parse_text("2026-12-06T10:00:00.000000Z").expect("time");
        let recent = "2026-12-06T09:58:00.000000Z";
        let old = "2026-12-06T09:54:59.999999Z";
        assert!(is_final(true, recent, now, 300));
        assert!(!is_final(false, recent, now, 300));
        assert!(is_final(false, old, now, 300));
        assert!(!is_final(false, "2026-12-06T09:55:00.000000Z", now, 300));
        assert!(is_final(false, "not a time", now, 300));
    }

    /// A signature verifies with its key over its hash only: RFC 8032's
    /// first test vector's key, then another hash, another key, and a
    /// changed signature fail.
    #[test]
    fn a_seal_signature_verifies_only_for_its_key_and_hash() {
        let seed: [u8; 32] =
            hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                .expect("hex")
                .try_into()
                .expect("32 bytes");
        let public = public_key(&seed);
        assert_eq!(
            hex::encode(public),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        );
        let hash = Sha256::digest(b"seal").into();
        let signature = sign(&seed, &hash);
        assert!(verify_signature(&public, &hash, &signature));
        let other: Hash = Sha256::digest(b"other").into();
        assert!(!verify_signature(&public, &other, &signature));
        assert!(!verify_signature(&public_key(&[7; 32]), &hash, &signature));
        let mut changed = signature;
        changed[10] ^= 1;
        assert!(!verify_signature(&public, &hash, &changed));
        assert_eq!(key_id(&public).len(), 16);
    }
}
