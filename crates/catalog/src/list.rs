//! S3 listing (prefix, delimiter, start-after, max-keys) over an ordered key index.
//!
//! Keys are compared as bytes (UTF-8 order = S3's order). The walk asks the index for keys `>= from` in batches;
//! when a key rolls up into a common prefix, the walk jumps past every key under that prefix with one range
//! query (`from = successor(common prefix)`) instead of reading them: a listing with a delimiter costs one query
//! per common prefix returned, not one row per key.

use crate::{ListPage, ListQuery, ObjectRecord};

/// Default and upper bound of `max_keys` (S3's).
pub const MAX_KEYS_DEFAULT: usize = 1000;

/// The smallest byte string greater than every string that starts with `prefix`, or `None` when there is none
/// (an empty prefix or all bytes 0xFF).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// The smallest byte string greater than `key`.
fn key_successor(key: &[u8]) -> Vec<u8> {
    let mut s = key.to_vec();
    s.push(0);
    s
}

/// Walk keys in order using `fetch(from, limit)` (objects with key `>= from`, ascending, at most `limit`).
pub(crate) fn list_with<E>(
    query: &ListQuery,
    mut fetch: impl FnMut(&[u8], usize) -> Result<Vec<ObjectRecord>, E>,
) -> Result<ListPage, E> {
    let max_keys = if query.max_keys == 0 {
        MAX_KEYS_DEFAULT
    } else {
        query.max_keys.min(MAX_KEYS_DEFAULT)
    };
    let prefix = query.prefix.as_bytes();
    let delimiter = query
        .delimiter
        .as_deref()
        .filter(|d| !d.is_empty())
        .map(str::as_bytes);
    let upper = prefix_successor(prefix);

    // Where to start: the prefix, or just after `start_after` (after its whole common prefix if it is one).
    let mut from = prefix.to_vec();
    if let Some(after) = query.start_after.as_deref().map(str::as_bytes) {
        let skip_to = match (delimiter, after.strip_prefix(prefix)) {
            (Some(d), Some(rest)) if find(rest, d).is_some_and(|at| at + d.len() == rest.len()) => {
                prefix_successor(after)
            }
            _ => Some(key_successor(after)),
        };
        match skip_to {
            Some(s) if s > from => from = s,
            Some(_) => {}
            None => return Ok(ListPage::default()),
        }
    }

    let mut page = ListPage::default();
    let mut entries = 0usize;
    let batch = (max_keys + 1).min(MAX_KEYS_DEFAULT + 1);
    'walk: loop {
        if upper.as_deref().is_some_and(|u| from.as_slice() >= u) {
            break;
        }
        let rows = fetch(&from, batch)?;
        let exhausted = rows.len() < batch;
        let mut next_from = None;
        for object in rows {
            let key = object.key.as_bytes();
            if !key.starts_with(prefix) {
                break 'walk; // past the prefix: keys are ordered
            }
            let rolled = delimiter
                .and_then(|d| find(&key[prefix.len()..], d).map(|at| prefix.len() + at + d.len()));
            if entries == max_keys {
                page.is_truncated = true;
                break 'walk;
            }
            entries += 1;
            match rolled {
                Some(end) => {
                    let common = &key[..end];
                    page.common_prefixes
                        .push(String::from_utf8_lossy(common).into_owned());
                    page.next_start_after = Some(String::from_utf8_lossy(common).into_owned());
                    match prefix_successor(common) {
                        Some(s) => next_from = Some(s),
                        None => break 'walk,
                    }
                    break; // jump past the common prefix with a new range query
                }
                None => {
                    page.next_start_after = Some(object.key.clone());
                    from = key_successor(key);
                    page.objects.push(object);
                }
            }
        }
        match next_from {
            Some(s) => from = s,
            None if exhausted => break,
            None => {}
        }
    }
    if !page.is_truncated {
        page.next_start_after = None;
    }
    Ok(page)
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContentId, Encoding};

    fn object(key: &str) -> ObjectRecord {
        ObjectRecord {
            bucket: "b".into(),
            key: key.into(),
            content: ContentId {
                hash: [0; 32],
                encoding: Encoding::Identity,
            },
            size_bytes: 0,
            etag: String::new(),
            last_modified_ms: 0,
            content_type: None,
            user_metadata: vec![],
            checksums: vec![],
            dataset: "b".into(),
            version_id: String::new(),
            attributes: Default::default(),
            expires_ms: None,
        }
    }

    /// Runs a listing over `keys` and counts fetches.
    fn run(keys: &[&str], query: &ListQuery) -> (ListPage, usize) {
        let mut sorted: Vec<&str> = keys.to_vec();
        sorted.sort();
        let mut fetches = 0;
        let page = list_with::<()>(query, |from, limit| {
            fetches += 1;
            Ok(sorted
                .iter()
                .filter(|k| k.as_bytes() >= from)
                .take(limit)
                .map(|k| object(k))
                .collect())
        })
        .unwrap();
        (page, fetches)
    }

    fn keys_of(page: &ListPage) -> Vec<&str> {
        page.objects.iter().map(|o| o.key.as_str()).collect()
    }

    #[test]
    fn prefix_successor_carries_over_0xff() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b""), None);
    }

    #[test]
    fn delimiter_rolls_keys_into_common_prefixes_with_one_query_each() {
        let mut keys = vec!["a.txt", "z.txt"];
        let many: Vec<String> = (0..500).map(|i| format!("photos/{i:04}.jpg")).collect();
        keys.extend(many.iter().map(String::as_str));
        keys.push("photos2/x");
        let q = ListQuery {
            delimiter: Some("/".into()),
            ..Default::default()
        };
        let (page, fetches) = run(&keys, &q);
        assert_eq!(keys_of(&page), vec!["a.txt", "z.txt"]);
        assert_eq!(page.common_prefixes, vec!["photos/", "photos2/"]);
        assert!(!page.is_truncated);
        assert!(
            fetches <= 4,
            "skipping a common prefix must not read its keys ({fetches} fetches)"
        );
    }

    #[test]
    fn prefix_limits_the_listing() {
        let keys = ["a/1", "a/2", "a/3/x", "b/1", "a"];
        let q = ListQuery {
            prefix: "a/".into(),
            delimiter: Some("/".into()),
            ..Default::default()
        };
        let (page, _) = run(&keys, &q);
        assert_eq!(keys_of(&page), vec!["a/1", "a/2"]);
        assert_eq!(page.common_prefixes, vec!["a/3/"]);
    }

    #[test]
    fn max_keys_truncates_and_start_after_resumes_without_repeats() {
        let keys = ["a", "b/1", "b/2", "c", "d/1", "e"];
        let mut q = ListQuery {
            delimiter: Some("/".into()),
            max_keys: 2,
            ..Default::default()
        };
        let mut seen = Vec::new();
        loop {
            let (page, _) = run(&keys, &q);
            seen.extend(keys_of(&page).into_iter().map(String::from));
            seen.extend(page.common_prefixes.iter().cloned());
            if !page.is_truncated {
                break;
            }
            q.start_after = page.next_start_after.clone();
        }
        assert_eq!(seen, vec!["a", "b/", "c", "d/", "e"]);
    }

    #[test]
    fn listing_without_delimiter_returns_every_key_in_order() {
        let keys = ["x/2", "x/1", "y", "x/10"];
        let (page, _) = run(&keys, &ListQuery::default());
        assert_eq!(keys_of(&page), vec!["x/1", "x/10", "x/2", "y"]);
    }

    #[test]
    fn exact_max_keys_is_not_truncated() {
        let keys = ["a", "b"];
        let (page, _) = run(
            &keys,
            &ListQuery {
                max_keys: 2,
                ..Default::default()
            },
        );
        assert_eq!(keys_of(&page), vec!["a", "b"]);
        assert!(!page.is_truncated);
        assert_eq!(page.next_start_after, None);
    }
}
