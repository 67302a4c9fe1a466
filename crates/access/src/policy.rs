//! Bucket policies: the common statement shapes of AWS's policy language, parsed and evaluated.
//!
//! Supported: `Version`, `Id`, and `Statement` (one or a list) with `Sid`, `Effect` (`Allow`/`Deny`),
//! `Principal` (`"*"`, `{"AWS": "*"}`, or access key names, also as `arn:aws:iam::ACCOUNT:user/NAME`),
//! `Action` (`s3:GetObject`, wildcards such as `s3:Get*` or `s3:*`) and `Resource` (`arn:aws:s3:::BUCKET`,
//! `arn:aws:s3:::BUCKET/*`, `arn:aws:s3:::BUCKET/PREFIX*`: this bucket only). Anything else (`Condition`,
//! `NotPrincipal`, `NotAction`, `NotResource`, another bucket) is refused with a message naming it, never
//! ignored: a policy that meant to restrict must not silently allow.

use serde_json::Value;

/// A statement's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
}

/// Whom a statement is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principals {
    /// `*`: everyone, anonymous requests included.
    Everyone,
    /// These access keys (by name).
    Keys(Vec<String>),
}

/// One statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sid: Option<String>,
    pub effect: Effect,
    pub principals: Principals,
    /// Action patterns (`s3:Get*`).
    pub actions: Vec<String>,
    /// What the statement covers: `None` for the bucket itself, `Some(pattern)` for objects whose key matches.
    pub resources: Vec<Resource>,
}

/// A resource of a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// `arn:aws:s3:::BUCKET`.
    Bucket,
    /// `arn:aws:s3:::BUCKET/PATTERN`: objects whose key matches (`*` and `?` wildcards).
    Objects(String),
}

/// A parsed policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub statements: Vec<Statement>,
}

/// What a request acts on, as a statement's resources match it.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// The bucket itself (`arn:aws:s3:::BUCKET`).
    Bucket,
    /// One object (`arn:aws:s3:::BUCKET/KEY`).
    Object(&'a str),
    /// Some objects not known yet (DeleteObjects before its keys are read): an `Allow` on any objects may
    /// apply, a `Deny` applies only when it covers every object (`BUCKET/*`); each key is decided again.
    SomeObject,
}

/// Who asks, as a policy matches it.
#[derive(Debug, Clone, Copy)]
pub enum Asker<'a> {
    Anonymous,
    Key(&'a str),
}

fn text_or_list(value: &Value, what: &str) -> Result<Vec<String>, String> {
    match value {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{what}: every entry must be a string"))
            })
            .collect(),
        _ => Err(format!("{what} must be a string or a list of strings")),
    }
}

/// `*` and `?` wildcards, case-sensitive (IAM matches actions case-insensitively: callers lowercase them).
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// A policy's text with the access key `name` replaced by `replacement` wherever a statement names it as a
/// principal (plain or as an `arn:…:user/NAME`); `None` when no statement names it.
pub fn rename_principal(text: &str, name: &str, replacement: &str) -> Option<String> {
    let mut doc: Value = serde_json::from_str(text).ok()?;
    let mut changed = false;
    let names_it = |v: &Value| {
        v.as_str()
            .is_some_and(|p| p == name || p.ends_with(&format!(":user/{name}")))
    };
    let statements = match doc.get_mut("Statement")? {
        Value::Array(items) => items.iter_mut().collect::<Vec<_>>(),
        one => vec![one],
    };
    for statement in statements {
        let Some(aws) = statement
            .get_mut("Principal")
            .and_then(|p| p.get_mut("AWS"))
        else {
            continue;
        };
        match aws {
            Value::Array(items) => {
                for item in items.iter_mut().filter(|i| names_it(i)) {
                    *item = Value::String(replacement.to_string());
                    changed = true;
                }
            }
            one if names_it(one) => {
                *one = Value::String(replacement.to_string());
                changed = true;
            }
            _ => {}
        }
    }
    changed.then(|| doc.to_string())
}

impl Policy {
    /// Parse a policy of `bucket`; the error names what is wrong or unsupported.
    pub fn parse(text: &str, bucket: &str) -> Result<Policy, String> {
        let doc: Value =
            serde_json::from_str(text).map_err(|e| format!("the policy is not JSON: {e}"))?;
        let Value::Object(doc) = doc else {
            return Err("the policy must be a JSON object".into());
        };
        for key in doc.keys() {
            if !matches!(key.as_str(), "Version" | "Id" | "Statement") {
                return Err(format!("policy element {key} is not supported"));
            }
        }
        if let Some(v) = doc.get("Version") {
            if !matches!(v.as_str(), Some("2012-10-17" | "2008-10-17")) {
                return Err(format!("policy Version {v}: expected \"2012-10-17\""));
            }
        }
        let statements = match doc.get("Statement") {
            Some(Value::Array(items)) => items.clone(),
            Some(one @ Value::Object(_)) => vec![one.clone()],
            _ => return Err("the policy has no Statement".into()),
        };
        if statements.is_empty() {
            return Err("the policy has no Statement".into());
        }
        let statements = statements
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Self::statement(s, bucket).map_err(|e| format!("statement {}: {e}", i + 1))
            })
            .collect::<Result<_, _>>()?;
        Ok(Policy { statements })
    }

    fn statement(value: &Value, bucket: &str) -> Result<Statement, String> {
        let Value::Object(s) = value else {
            return Err("a statement must be an object".into());
        };
        for key in s.keys() {
            match key.as_str() {
                "Sid" | "Effect" | "Principal" | "Action" | "Resource" => {}
                "Condition" => return Err("Condition is not supported (yet): leave it out".into()),
                other => return Err(format!("{other} is not supported")),
            }
        }
        let effect = match s.get("Effect").and_then(Value::as_str) {
            Some("Allow") => Effect::Allow,
            Some("Deny") => Effect::Deny,
            _ => return Err("Effect must be \"Allow\" or \"Deny\"".into()),
        };
        let principals = match s.get("Principal") {
            Some(Value::String(star)) if star == "*" => Principals::Everyone,
            Some(Value::Object(p)) => {
                if let Some(other) = p.keys().find(|k| k.as_str() != "AWS") {
                    return Err(format!(
                        "Principal {other} is not supported: use \"*\" or {{\"AWS\": [KEY NAMES]}}"
                    ));
                }
                let names = text_or_list(p.get("AWS").unwrap_or(&Value::Null), "Principal AWS")?;
                if names.iter().any(|n| n == "*") {
                    Principals::Everyone
                } else {
                    Principals::Keys(
                        names
                            .iter()
                            .map(|n| {
                                n.rsplit_once(":user/")
                                    .map_or(n.as_str(), |(_, name)| name)
                                    .to_string()
                            })
                            .collect(),
                    )
                }
            }
            _ => {
                return Err(
                    "Principal must be \"*\" or {\"AWS\": \"KEY NAME\" or [KEY NAMES]}".into(),
                )
            }
        };
        let actions: Vec<String> = text_or_list(s.get("Action").unwrap_or(&Value::Null), "Action")?
            .into_iter()
            .map(|a| a.to_ascii_lowercase())
            .collect();
        if let Some(bad) = actions
            .iter()
            .find(|a| !(a.starts_with("s3:") || a == &"*"))
        {
            return Err(format!("action {bad}: only s3: actions apply to a bucket"));
        }
        let resources = text_or_list(s.get("Resource").unwrap_or(&Value::Null), "Resource")?
            .iter()
            .map(|r| {
                let rest = r.strip_prefix("arn:aws:s3:::").ok_or_else(|| {
                    format!("resource {r}: expected arn:aws:s3:::{bucket} or arn:aws:s3:::{bucket}/…")
                })?;
                match rest.split_once('/') {
                    None if rest == bucket => Ok(Resource::Bucket),
                    Some((b, pattern)) if b == bucket => Ok(Resource::Objects(pattern.to_string())),
                    _ => Err(format!(
                        "resource {r} is not in bucket {bucket}: a bucket policy covers its own bucket"
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Statement {
            sid: s.get("Sid").and_then(Value::as_str).map(str::to_string),
            effect,
            principals,
            actions,
            resources,
        })
    }

    /// The statements of `effect` that cover `asker` doing `action` on `target`.
    pub fn matching<'a>(
        &'a self,
        effect: Effect,
        asker: Asker<'a>,
        action: &'a str,
        target: Target<'a>,
    ) -> impl Iterator<Item = &'a Statement> + 'a {
        let action = action.to_ascii_lowercase();
        self.statements.iter().filter(move |s| {
            s.effect == effect
                && match (&s.principals, asker) {
                    (Principals::Everyone, _) => true,
                    (Principals::Keys(names), Asker::Key(name)) => names.iter().any(|n| n == name),
                    (Principals::Keys(_), Asker::Anonymous) => false,
                }
                && s.actions.iter().any(|a| wildcard_match(a, &action))
                && s.resources.iter().any(|r| match (r, target) {
                    (Resource::Bucket, Target::Bucket) => true,
                    (Resource::Objects(pattern), Target::Object(key)) => {
                        wildcard_match(pattern, key)
                    }
                    (Resource::Objects(pattern), Target::SomeObject) => {
                        effect == Effect::Allow || pattern == "*"
                    }
                    _ => false,
                })
        })
    }

    /// Whether some statement allows everyone (what `GetBucketPolicyStatus` calls public).
    pub fn is_public(&self) -> bool {
        self.statements
            .iter()
            .any(|s| s.effect == Effect::Allow && s.principals == Principals::Everyone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PUBLIC_READ: &str = r#"{"Version":"2012-10-17","Statement":[{"Sid":"pub","Effect":"Allow",
        "Principal":"*","Action":["s3:GetObject"],"Resource":["arn:aws:s3:::runs/*"]}]}"#;

    #[test]
    fn a_public_read_policy_allows_anonymous_reads_of_objects_only() {
        let p = Policy::parse(PUBLIC_READ, "runs").unwrap();
        assert!(p.is_public());
        let get = |o| {
            p.matching(Effect::Allow, Asker::Anonymous, "s3:GetObject", o)
                .count()
        };
        assert_eq!(get(Target::Object("a/b")), 1);
        assert_eq!(
            p.matching(
                Effect::Allow,
                Asker::Anonymous,
                "s3:ListBucket",
                Target::Bucket
            )
            .count(),
            0,
            "the statement names objects, not the bucket"
        );
        assert_eq!(
            p.matching(
                Effect::Allow,
                Asker::Anonymous,
                "s3:PutObject",
                Target::Object("a")
            )
            .count(),
            0
        );
    }

    #[test]
    fn principals_name_keys_plain_or_as_arns_and_actions_take_wildcards() {
        let text = r#"{"Statement":{"Effect":"Deny","Principal":{"AWS":["arn:aws:iam::123:user/robot","cam"]},
            "Action":"s3:Delete*","Resource":"arn:aws:s3:::runs/raw/*"}}"#;
        let p = Policy::parse(text, "runs").unwrap();
        assert!(!p.is_public());
        let deny = |who, action, key| {
            p.matching(Effect::Deny, Asker::Key(who), action, Target::Object(key))
                .count()
        };
        assert_eq!(deny("robot", "s3:DeleteObject", "raw/1"), 1);
        assert_eq!(deny("cam", "s3:deleteobjectversion", "raw/1"), 1);
        assert_eq!(deny("other", "s3:DeleteObject", "raw/1"), 0);
        assert_eq!(deny("robot", "s3:DeleteObject", "cooked/1"), 0);
        assert_eq!(deny("robot", "s3:GetObject", "raw/1"), 0);
    }

    #[test]
    fn what_is_not_supported_is_refused_by_name() {
        let cases = [
            (
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::runs/*","Condition":{}}]}"#,
                "Condition",
            ),
            (
                r#"{"Statement":[{"Effect":"Allow","NotPrincipal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::runs/*"}]}"#,
                "NotPrincipal",
            ),
            (
                r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}]}"#,
                "other",
            ),
            (
                r#"{"Statement":[{"Effect":"Maybe","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::runs"}]}"#,
                "Effect",
            ),
            (
                r#"{"Statement":[{"Effect":"Allow","Principal":{"Service":"x"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::runs"}]}"#,
                "Service",
            ),
            (r#"{"Statement":[]}"#, "no Statement"),
            ("not json", "not JSON"),
        ];
        for (text, word) in cases {
            let e = Policy::parse(text, "runs").unwrap_err();
            assert!(e.contains(word), "{text}: {e}");
        }
    }

    proptest! {
        #[test]
        fn a_pattern_without_wildcards_matches_only_itself(a in "[a-z/]{0,8}", b in "[a-z/]{0,8}") {
            prop_assert_eq!(wildcard_match(&a, &b), a == b);
        }

        #[test]
        fn a_prefix_star_matches_exactly_the_keys_with_that_prefix(p in "[a-z/]{0,6}", k in "[a-z/]{0,10}") {
            prop_assert_eq!(wildcard_match(&format!("{p}*"), &k), k.starts_with(&p));
        }
    }
}
