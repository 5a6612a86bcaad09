//! `parse_script` on arbitrary text: a script is accepted whole or refused
//! with a typed error naming its first bad line, never a panic; an
//! accepted script is one `recall simulate` can apply in order.
//!
//! Shared by the fuzz target of the same name and by `tests/fuzz_corpus.rs`,
//! which runs it over the committed corpus on every test run.

use std::collections::HashSet;

use recall::simulate::{parse_script, Action};
use recall_actors::context::MAX_BUDGET_TOKENS;
use recall_actors::model::validate_id;

/// One input: what it must keep to, asserted.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.lines().collect();
    match parse_script(&text) {
        Ok(events) => {
            assert!(!events.is_empty());
            let mut started = HashSet::new();
            let mut prev: Option<&recall::simulate::Event> = None;
            for ev in &events {
                assert!(ev.line >= 1 && ev.line <= lines.len(), "line {}", ev.line);
                let src = lines[ev.line - 1].trim();
                assert!(!src.is_empty() && !src.starts_with('#') && !src.starts_with("//"));
                if let Some(p) = prev {
                    assert!(ev.line > p.line, "lines out of order");
                    assert!(ev.at >= p.at, "time goes backwards at line {}", ev.line);
                }
                prev = Some(ev);
                match &ev.action {
                    Action::Start {
                        agent_id,
                        user_id,
                        connection_id,
                    } => {
                        for id in [agent_id, user_id, connection_id] {
                            assert!(validate_id("id", id).is_ok(), "{id:?}");
                        }
                        started.insert(connection_id.as_str());
                    }
                    Action::Turn {
                        connection_id,
                        user_message,
                        agent_response,
                    } => {
                        assert!(started.contains(connection_id.as_str()));
                        assert!(
                            !(user_message.trim().is_empty() && agent_response.trim().is_empty())
                        );
                    }
                    Action::Touch { connection_id } | Action::End { connection_id } => {
                        assert!(started.contains(connection_id.as_str()));
                    }
                    Action::Context {
                        agent_id,
                        user_id,
                        budget_tokens,
                        ..
                    } => {
                        assert!(validate_id("agent_id", agent_id).is_ok());
                        assert!(validate_id("user_id", user_id).is_ok());
                        assert!((1..=MAX_BUDGET_TOKENS).contains(budget_tokens));
                    }
                    Action::Search {
                        agent_id,
                        user_id,
                        query,
                        limit,
                    } => {
                        assert!(validate_id("agent_id", agent_id).is_ok());
                        if let Some(u) = user_id {
                            assert!(validate_id("user_id", u).is_ok());
                        }
                        assert!(!query.trim().is_empty());
                        assert!((1..=100).contains(limit));
                    }
                }
            }
        }
        Err(e) => {
            assert!(!e.reason.is_empty());
            assert!(e.line <= lines.len(), "line {} of {}", e.line, lines.len());
            if e.line == 0 {
                assert_eq!(e.reason, "the script has no events");
            } else {
                // The error names the first bad line: everything before it
                // is a valid script, or no script at all.
                let before = lines[..e.line - 1].join("\n");
                if let Err(p) = parse_script(&before) {
                    assert_eq!(p.line, 0, "{p} is before {e}");
                }
            }
        }
    }
}
