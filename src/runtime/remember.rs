//! Remembering what a user states outside a call: the facts in their
//! words, stored as a reflection stores a call's.

use std::collections::HashSet;

use recall_actors::model::{normalize_fact, Fact, FactCandidate, FactCategory, Speaker};

use super::*;

/// Longest statement [`Runtime::remember`] takes, in bytes.
pub const MAX_STATEMENT_BYTES: usize = 4096;

/// Most facts one statement may state: as many as a call's reflection
/// keeps.
pub const MAX_FACTS: usize = recall_actors::reflect::parse::MAX_FACTS;

/// What [`Runtime::remember`] did with a statement.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Remembered {
    /// The facts stored from it, new.
    pub stored: Vec<FactRecord>,
    /// The facts it states that the user's memory held already, as
    /// stored.
    pub known: Vec<FactRecord>,
}

impl Runtime {
    /// Remembers what `user_id` states, in the first person ("I moved to
    /// Porto in May", "My sister Leela is a nurse"): the facts the rules a
    /// reflection uses find in it, and each sentence they do not tell in
    /// full, as it was said (nothing said is dropped). Stored as a call's
    /// facts are: private to the user, a fact they have already is not
    /// stored twice, a new value of a one-valued subject (their employer,
    /// their home) replaces the earlier one (within the statement too, in
    /// the order said), and one they deleted is stored again (they said it
    /// anew). At most [`MAX_FACTS`] facts at once. Searchable and in the user's
    /// next context at once.
    pub async fn remember(
        &self,
        agent_id: &str,
        user_id: &str,
        statement: &str,
    ) -> Result<Remembered, RecallError> {
        recall_actors::model::validate_id("agent_id", agent_id)?;
        recall_actors::model::validate_id("user_id", user_id)?;
        let statement = checked_statement(statement)?;
        let candidates = stated_facts(&statement);
        if candidates.len() > MAX_FACTS {
            return Err(InputError::Invalid {
                field: "statement",
                reason: format!(
                    "it states {} facts; at most {MAX_FACTS} at once, as a call's reflection keeps",
                    candidates.len()
                ),
            }
            .into());
        }
        let now = self.inner.clock.now();
        // Ids in the statement's order (one random base, the position in
        // its low bits): of two values of one subject stated together, the
        // one said later is the later value.
        let base = Uuid::new_v4().as_u128() & !0xffff;
        let mut position = 0u128;
        let mut fact = |category, content: String, subject| Fact {
            fact_id: {
                position += 1;
                Uuid::from_u128(base | position)
            },
            agent_id: agent_id.to_string(),
            user_id: user_id.to_string(),
            category,
            content,
            subject,
            visibility: Visibility::Private,
            source_session_id: None,
            extracted_at: now,
            conflicts_with: None,
            speaker: Speaker::User,
        };
        let facts: Vec<Fact> = candidates
            .into_iter()
            .map(|c| fact(c.category, c.content, c.subject))
            .collect();
        let changes = self
            .store(|reply| StoreMsg::PutStatedFacts {
                facts: facts.clone(),
                stated_at: now,
                reply,
            })
            .await?;
        let mut known = Vec::new();
        let stated: Vec<String> = facts
            .iter()
            .filter(|f| !changes.added.iter().any(|a| a.fact_id == f.fact_id))
            .map(|f| normalize_fact(&f.content))
            .collect();
        if !stated.is_empty() {
            for f in self.facts(agent_id, user_id).await? {
                let theirs = f.user_id == user_id && f.speaker == Speaker::User;
                if theirs && f.is_current() && stated.contains(&normalize_fact(&f.content)) {
                    known.push(f);
                }
            }
        }
        Ok(Remembered {
            stored: changes.added,
            known,
        })
    }
}

/// The facts of a statement: those the rules find in each sentence, and
/// the sentence itself, in its words, where they leave a word of it out
/// ("I moved to Porto in May." is "Moved to Porto" and the sentence, which
/// keeps the month) or find nothing in it.
fn stated_facts(statement: &str) -> Vec<FactCandidate> {
    use recall_actors::lang::stem;
    use recall_actors::text::{facts_by_sentence, is_date_word, is_stopword, sentences, words};
    // The stems of every word but the function words: dates ("may" is
    // one too) and numbers count; "work" is told by "Works at".
    let telling = |text: &str| -> HashSet<String> {
        words(text)
            .filter(|w| !is_stopword(w) || is_date_word(w))
            .map(|w| stem(&w))
            .collect()
    };
    let sentences = sentences(statement);
    let mut out = Vec::new();
    for (sentence, found) in sentences.iter().zip(facts_by_sentence(&sentences)) {
        let covered: HashSet<String> = found.iter().flat_map(|f| telling(&f.content)).collect();
        let all_told = telling(sentence).is_subset(&covered);
        out.extend(found);
        if !all_told || out.is_empty() {
            out.push(FactCandidate {
                category: FactCategory::Other,
                content: sentence.clone(),
                subject: None,
                speaker: Speaker::User,
            });
        }
    }
    out
}

/// The statement, its runs of white space made one space: refused when
/// empty, wordless, over [`MAX_STATEMENT_BYTES`] or holding a control
/// character other than a line break or tab.
fn checked_statement(statement: &str) -> Result<String, InputError> {
    const FIELD: &str = "statement";
    if statement.len() > MAX_STATEMENT_BYTES {
        return Err(InputError::TooLong {
            field: FIELD,
            len: statement.len(),
            max: MAX_STATEMENT_BYTES,
        });
    }
    if statement
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(InputError::ControlCharacter { field: FIELD });
    }
    let joined = statement.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.is_empty() {
        return Err(InputError::Empty { field: FIELD });
    }
    if !joined.chars().any(char::is_alphanumeric) {
        return Err(InputError::Invalid {
            field: FIELD,
            reason: "it holds no word".into(),
        });
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_is_refused_empty_too_long_or_with_control_characters() {
        assert!(matches!(
            checked_statement(" \n\t "),
            Err(InputError::Empty { .. })
        ));
        let long = "a".repeat(MAX_STATEMENT_BYTES + 1);
        assert!(matches!(
            checked_statement(&long),
            Err(InputError::TooLong { .. })
        ));
        assert!(matches!(
            checked_statement("I live in\u{7} Porto"),
            Err(InputError::ControlCharacter { .. })
        ));
        assert!(matches!(
            checked_statement(" ?! … "),
            Err(InputError::Invalid { .. })
        ));
        assert_eq!(
            checked_statement("  I live\n in\tPorto. ").unwrap(),
            "I live in Porto."
        );
    }

    fn contents(statement: &str) -> Vec<String> {
        stated_facts(statement)
            .into_iter()
            .map(|f| f.content)
            .collect()
    }

    #[test]
    fn a_sentence_the_rules_tell_in_part_or_not_at_all_is_kept_as_said() {
        // told in full by a rule: the rule's fact alone
        let told = contents("My sister Leela is a nurse.");
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(told[0].contains("Leela") && told[0].contains("nurse"));
        // a rule's fact leaves the month out: the sentence is kept too
        let part = contents("I moved to Lisbon in March.");
        assert!(part.len() >= 2, "{part:?}");
        assert!(part.contains(&"I moved to Lisbon in March.".to_string()));
        // "May" is a month here, though also a function word
        let may = contents("I moved to Lisbon in May.");
        assert!(
            may.contains(&"I moved to Lisbon in May.".to_string()),
            "{may:?}"
        );
        // told in other forms of its words: the rule's fact alone
        let forms = contents("I work at Initech.");
        assert_eq!(forms.len(), 1, "{forms:?}");
        // nothing a rule reads (not in the first person): as said
        let none = contents("The user prefers morning calls before nine.");
        assert_eq!(none, ["The user prefers morning calls before nine."]);
        // sentence by sentence, in order
        let two = contents("Call me after six. My dog Biscuit is a beagle.");
        assert!(two.len() >= 2, "{two:?}");
        assert!(two.iter().any(|c| c.contains("Biscuit")));
    }
}
