//! The archive file of sealed audit records (docs/audit.md): its lines,
//! and the offline check of a whole archive against its own seals.
//!
//! An archive is JSON Lines (zstd-compressed on disk), one object per line,
//! each with one key naming what it is:
//!
//! ```text
//! {"header":{"format":"writ-audit-archive","v":1,"first_seal":F,"through_seal":T,"seals":S,"records":N,"archived_at":"…"}}
//! {"key":{"key_id":"…","algorithm":"ed25519","public_key":"…"}}          every key its seals name
//! {"seal":{"seq":F,…,"seal_hash":"…","signature":"…","call_ids":[…]}}    then its records, in sealing order
//! {"record":{"v":1,"call_id":…,…}}                                       the leaf object L, as hashed
//! …
//! {"end":{"seals":S,"records":N}}
//! ```
//!
//! A record line holds the leaf object `L` itself, so its leaf hash is
//! `SHA-256(0x00 ‖ JCS(record))` of the line's object, whatever it holds.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::seal::{self, Hash, Prev, SealFields};

/// The `format` of an archive's header.
pub const FORMAT: &str = "writ-audit-archive";
/// The version of the archive format.
pub const VERSION: u32 = 1;

/// The first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub format: String,
    pub v: u32,
    pub first_seal: i64,
    pub through_seal: i64,
    pub seals: i64,
    pub records: i64,
    pub archived_at: String,
}

/// A public key that signed some of the archive's seals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Key {
    pub key_id: String,
    pub algorithm: String,
    /// The raw 32-byte Ed25519 public key, hex.
    pub public_key: String,
}

/// A seal (the fields its hash covers, its hash and signature) with the
/// ids of its records, in sealing order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    #[serde(flatten)]
    pub fields: SealFields,
    pub seal_hash: String,
    pub signature: Option<String>,
    pub call_ids: Vec<i64>,
}

/// The last line: what the archive holds, so a file cut short is seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct End {
    pub seals: i64,
    pub records: i64,
}

/// One line of an archive.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Line {
    Header(Header),
    Key(Key),
    Seal(Seal),
    Record(serde_json::Value),
    End(End),
}

impl Line {
    /// The line's text (no newline).
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("an archive line always serializes")
    }
}

/// The leaf hash of a record line's object: `SHA-256(0x00 ‖ JCS(record))`.
pub fn record_leaf(record: &serde_json::Value) -> Hash {
    let json = serde_jcs::to_string(record).expect("a JSON value always serializes");
    seal::leaf_hash(json.as_bytes())
}

/// The first thing in an archive that does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The seal it is in, if any.
    pub seal: Option<i64>,
    /// The record, when one is to blame.
    pub call_id: Option<i64>,
    pub problem: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.seal, self.call_id) {
            (Some(seal), Some(id)) => write!(f, "seal {seal} record {id}: {}", self.problem),
            (Some(seal), None) => write!(f, "seal {seal}: {}", self.problem),
            (None, _) => write!(f, "archive: {}", self.problem),
        }
    }
}

/// A whole archive that holds: its header, and its seals' numbers and
/// hashes (to compare with a database's).
#[derive(Debug, Clone)]
pub struct Checked {
    pub header: Header,
    pub seals: Vec<(i64, String)>,
    pub records: u64,
    /// The keys it lists.
    pub keys: Vec<Key>,
}

/// Checks an archive line by line: the header first, then keys, then each
/// seal followed by exactly its records, then the end line. Each seal's
/// hash, signature, link to the seal before it and Merkle root over its
/// records' leaves are recomputed. The first seal's own link is taken as
/// given (it points into the database or an earlier archive).
#[derive(Debug, Default)]
pub struct Checker {
    header: Option<Header>,
    keys: HashMap<String, Key>,
    /// The seal being read, the leaves of its records so far.
    open: Option<(Seal, Vec<Hash>)>,
    /// The last complete seal.
    prev: Option<Seal>,
    seals: Vec<(i64, String)>,
    records: u64,
    end: Option<End>,
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }

    fn at(&self, call_id: Option<i64>, problem: impl Into<String>) -> Finding {
        Finding {
            seal: self
                .open
                .as_ref()
                .map(|(s, _)| s.fields.seq)
                .or(self.prev.as_ref().map(|s| s.fields.seq)),
            call_id,
            problem: problem.into(),
        }
    }

    /// Whether the end line was read.
    pub fn ended(&self) -> bool {
        self.end.is_some()
    }

    /// Takes the next line (without its newline).
    pub fn line(&mut self, text: &str) -> Result<(), Finding> {
        if self.end.is_some() {
            return Err(self.at(None, "a line follows the end line"));
        }
        let line: Line = serde_json::from_str(text).map_err(|e| {
            let after = self.expected_record();
            self.at(after, format!("a line is not an archive line ({e})"))
        })?;
        match line {
            Line::Header(h) => self.header(h),
            Line::Key(k) => self.key(k),
            Line::Seal(s) => self.seal(s),
            Line::Record(r) => self.record(r),
            Line::End(e) => self.end(e),
        }
    }

    /// The id of the record the open seal expects next.
    fn expected_record(&self) -> Option<i64> {
        self.open
            .as_ref()
            .and_then(|(s, leaves)| s.call_ids.get(leaves.len()).copied())
    }

    fn header(&mut self, h: Header) -> Result<(), Finding> {
        if self.header.is_some() {
            return Err(self.at(None, "a second header line"));
        }
        if h.format != FORMAT || h.v != VERSION {
            return Err(self.at(None, format!("it is not a {FORMAT} of version {VERSION}")));
        }
        self.header = Some(h);
        Ok(())
    }

    fn key(&mut self, k: Key) -> Result<(), Finding> {
        if self.header.is_none() || self.open.is_some() || self.prev.is_some() {
            return Err(self.at(None, "a key line out of place"));
        }
        let public: Option<[u8; 32]> = seal::from_hex(&k.public_key);
        if k.algorithm != "ed25519" || public.is_none_or(|p| seal::key_id(&p) != k.key_id) {
            return Err(self.at(
                None,
                format!("key {} is not an Ed25519 key of that id", k.key_id),
            ));
        }
        self.keys.insert(k.key_id.clone(), k);
        Ok(())
    }

    fn seal(&mut self, s: Seal) -> Result<(), Finding> {
        self.close_seal()?;
        let Some(header) = &self.header else {
            return Err(self.at(None, "the archive does not start with its header"));
        };
        let link = match &self.prev {
            Some(p) => Some(Prev {
                seq: p.fields.seq,
                last: p.fields.last,
                seal_hash: &p.seal_hash,
            }),
            None if s.fields.seq != header.first_seal => {
                return Err(self.at(
                    None,
                    format!(
                        "its first seal is {}, not {}",
                        s.fields.seq, header.first_seal
                    ),
                ));
            }
            // The first seal links to one outside the archive.
            None => s.fields.prev_seal_hash.as_deref().map(|hash| Prev {
                seq: s.fields.seq - 1,
                last: s.fields.first - 1,
                seal_hash: hash,
            }),
        };
        let problem = seal::seal_problem(
            link,
            &s.fields,
            &s.seal_hash,
            s.signature.as_deref(),
            |id| self.keys.get(id).map(|k| k.public_key.clone()),
        );
        let seq = s.fields.seq;
        let count = s.fields.count;
        let ids = s.call_ids.len();
        self.open = Some((s, Vec::new()));
        if let Some(problem) = problem {
            return Err(self.at(None, problem));
        }
        if ids as i64 != count {
            return Err(self.at(None, format!("seal {seq} lists {ids} records, not {count}")));
        }
        Ok(())
    }

    fn record(&mut self, r: serde_json::Value) -> Result<(), Finding> {
        let expected = self.expected_record();
        let Some((seal, leaves)) = &mut self.open else {
            return Err(self.at(None, "a record outside any seal"));
        };
        let Some(expected) = expected else {
            let seq = seal.fields.seq;
            return Err(self.at(None, format!("seal {seq} has more records than it counts")));
        };
        if r.get("call_id").and_then(serde_json::Value::as_i64) != Some(expected) {
            return Err(self.at(Some(expected), "the record is missing, or out of its place"));
        }
        leaves.push(record_leaf(&r));
        self.records += 1;
        Ok(())
    }

    /// Ends the open seal: all its records read, their root its own.
    fn close_seal(&mut self) -> Result<(), Finding> {
        let Some((seal, leaves)) = self.open.take() else {
            return Ok(());
        };
        if leaves.len() < seal.call_ids.len() {
            let missing = seal.call_ids[leaves.len()];
            self.open = Some((seal, leaves));
            return Err(self.at(Some(missing), "the archive ends before this record"));
        }
        if hex::encode(seal::merkle_root(&leaves)) != seal.fields.merkle_root {
            let seq = seal.fields.seq;
            self.open = Some((seal, leaves));
            return Err(Finding {
                seal: Some(seq),
                call_id: None,
                problem: "its records do not make its merkle_root (a record was changed)".into(),
            });
        }
        self.seals.push((seal.fields.seq, seal.seal_hash.clone()));
        self.prev = Some(seal);
        Ok(())
    }

    fn end(&mut self, e: End) -> Result<(), Finding> {
        self.close_seal()?;
        let Some(header) = &self.header else {
            return Err(self.at(None, "the archive does not start with its header"));
        };
        let through = self.prev.as_ref().map(|s| s.fields.seq);
        if e.seals != header.seals
            || e.records != header.records
            || self.seals.len() as i64 != header.seals
            || self.records as i64 != header.records
            || through != Some(header.through_seal)
        {
            return Err(self.at(
                None,
                format!(
                    "it holds {} seals and {} records through seal {}, not the {} and {} through {} its header and end line say",
                    self.seals.len(),
                    self.records,
                    through.unwrap_or(0),
                    header.seals,
                    header.records,
                    header.through_seal
                ),
            ));
        }
        self.end = Some(e);
        Ok(())
    }

    /// The archive read to its last byte, or to where it could no longer
    /// be read: what it holds, or why it does not hold.
    pub fn finish(mut self) -> Result<Checked, Finding> {
        if self.end.is_none() {
            if let Some(missing) = self.expected_record() {
                return Err(self.at(
                    Some(missing),
                    "the archive ends before this record (it is truncated)",
                ));
            }
            self.close_seal()?;
            return Err(self.at(
                None,
                "the archive ends before its end line (it is truncated)",
            ));
        }
        let header = self
            .header
            .take()
            .expect("an archive with an end has a header");
        let mut keys: Vec<Key> = self.keys.into_values().collect();
        keys.sort_by(|a, b| a.key_id.cmp(&b.key_id));
        Ok(Checked {
            header,
            seals: self.seals,
            records: self.records,
            keys,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archive of two seals (2 and 3 records) following seal 4, signed.
    fn archive() -> Vec<String> {
        let seed = [7u8; 32];
        let public = seal::public_key(&seed);
        let key_id = seal::key_id(&public);
        let records: Vec<serde_json::Value> = (10..15)
            .map(|id| serde_json::json!({"v": 1, "call_id": id, "tool": "t", "reason": "r"}))
            .collect();
        let mut lines = vec![
            Line::Header(Header {
                format: FORMAT.into(),
                v: VERSION,
                first_seal: 5,
                through_seal: 6,
                seals: 2,
                records: 5,
                archived_at: "2026-12-06T00:00:00.000000Z".into(),
            }),
            Line::Key(Key {
                key_id: key_id.clone(),
                algorithm: "ed25519".into(),
                public_key: hex::encode(public),
            }),
        ];
        let mut prev = Some((4, 40, [9u8; 32]));
        for chunk in [&records[..2], &records[2..]] {
            let leaves: Vec<Hash> = chunk.iter().map(record_leaf).collect();
            let f = SealFields::next(
                prev.as_ref().map(|(s, l, h)| (*s, *l, h)),
                &leaves,
                "2026-12-06T00:00:00.000000Z",
                Some(&key_id),
            );
            let hash = f.hash();
            lines.push(Line::Seal(Seal {
                fields: f.clone(),
                seal_hash: hex::encode(hash),
                signature: Some(hex::encode(seal::sign(&seed, &hash))),
                call_ids: chunk
                    .iter()
                    .map(|r| r["call_id"].as_i64().unwrap())
                    .collect(),
            }));
            lines.extend(chunk.iter().cloned().map(Line::Record));
            prev = Some((f.seq, f.last, hash));
        }
        lines.push(Line::End(End {
            seals: 2,
            records: 5,
        }));
        lines.iter().map(Line::to_text).collect()
    }

    fn check(lines: &[String]) -> Result<Checked, Finding> {
        let mut c = Checker::new();
        for line in lines {
            c.line(line)?;
        }
        c.finish()
    }

    #[test]
    fn a_whole_archive_holds() {
        let checked = check(&archive()).expect("holds");
        assert_eq!(checked.records, 5);
        assert_eq!(
            checked.seals.iter().map(|s| s.0).collect::<Vec<_>>(),
            [5, 6]
        );
    }

    #[test]
    fn a_cut_archive_names_the_first_missing_record() {
        let lines = archive();
        // Header, key, seal 5, two records, seal 6, its first record.
        let f = check(&lines[..7]).unwrap_err();
        assert_eq!((f.seal, f.call_id), (Some(6), Some(13)), "{f}");
        assert!(f.problem.contains("truncated"), "{f}");
        // Cut at a seal's end: the end line is missing.
        let f = check(&lines[..lines.len() - 1]).unwrap_err();
        assert_eq!((f.seal, f.call_id), (Some(6), None), "{f}");
        assert!(f.problem.contains("end line"), "{f}");
        // Cut inside a line.
        let mut cut = lines[..5].to_vec();
        cut.push(lines[5][..10].to_owned());
        let f = check(&cut).unwrap_err();
        assert_eq!((f.seal, f.call_id), (Some(5), None), "{f}");
    }

    #[test]
    fn a_changed_record_seal_or_signature_is_found() {
        let mut lines = archive();
        lines[3] = lines[3].replace("\"reason\":\"r\"", "\"reason\":\"x\"");
        let f = check(&lines).unwrap_err();
        assert_eq!(f.seal, Some(5), "{f}");
        assert!(f.problem.contains("merkle_root"), "{f}");

        let mut lines = archive();
        lines[5] = lines[5].replace("2026-12-06", "2026-12-07");
        let f = check(&lines).unwrap_err();
        assert_eq!(f.problem, "its seal_hash is not the hash of its fields");

        let mut lines = archive();
        let sig = lines[2].find("\"signature\":\"").unwrap() + 13;
        let flipped = if &lines[2][sig..sig + 1] == "a" {
            "b"
        } else {
            "a"
        };
        lines[2].replace_range(sig..sig + 1, flipped);
        let f = check(&lines).unwrap_err();
        assert!(
            f.problem.starts_with("its signature does not verify"),
            "{f}"
        );

        let mut lines = archive();
        lines.swap(3, 4);
        let f = check(&lines).unwrap_err();
        assert_eq!((f.seal, f.call_id), (Some(5), Some(10)), "{f}");

        let mut lines = archive();
        lines.remove(5);
        let f = check(&lines).unwrap_err();
        assert_eq!((f.seal, f.call_id), (Some(5), None), "{f}");
    }
}
