//! Settings of how a context read ranks and shows what it finds
//! (`[context.ranking]`): the keyword scoring's tuning, what related words
//! may cost, and how much of a retrieved turn or summary is shown.

use super::*;

/// How retrieval ranks the hits for a message and how much of each it
/// shows. The defaults are the values measured in docs/evaluation.md.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RankingSettings {
    /// BM25's length normalization (`b`): 0 scores an item's words
    /// whatever its length, 1 scales them fully by its length against the
    /// average.
    pub bm25_b: f32,
    /// The words too common to score by (see `max_term_share`) re-rank
    /// this many times the candidates wanted.
    pub common_rerank: usize,
    /// Keeping repeats to one place, the keyword side looks this many
    /// times past the candidates wanted for items that are not repeats.
    pub repeats_widen: usize,
    /// A related word in at most this many of an agent's items counts as
    /// said once or twice (those are taken as many again as the closest).
    pub rare_related_df: u32,
    /// A word in more than this share of the agent's items (said in
    /// passing in many calls) is left out of the scoring and only
    /// re-ranks: it ranks little and costs the most.
    pub max_term_share: f32,
    /// What the related words of a message may cost: the items holding
    /// them, in all, the rarest words taken first.
    pub related_postings: usize,
    /// The sentences of a retrieved summary shown at most (those holding
    /// the most words asked).
    pub summary_sentences: usize,
    /// A retrieved turn's answer up to this many tokens is shown whole
    /// (beside a hit, or as the answer to its question); so many of its
    /// opening sentences are shown where none holds a word asked.
    pub short_answer_tokens: usize,
    /// The answer of the turn a search hit is shown whole up to this many
    /// tokens.
    pub hit_answer_tokens: usize,
    /// Of a longer answer, the sentences holding a word asked shown at
    /// most (the question it ends on aside).
    pub answer_sentences: usize,
    /// An item is cut at a sentence to fill the room left only where that
    /// room is at least this many tokens.
    pub min_cut_tokens: usize,
}

impl Default for RankingSettings {
    fn default() -> Self {
        RankingSettings::DEFAULT
    }
}

impl RankingSettings {
    /// The defaults, as a constant.
    pub const DEFAULT: RankingSettings = RankingSettings {
        bm25_b: 0.75,
        common_rerank: 4,
        repeats_widen: 4,
        rare_related_df: 2,
        max_term_share: 0.05,
        related_postings: 5_000,
        summary_sentences: 5,
        short_answer_tokens: 30,
        hit_answer_tokens: 80,
        answer_sentences: 3,
        min_cut_tokens: 12,
    };

    /// Rejects values the runtime cannot run with, naming the key.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let b = self.bm25_b;
        if !(0.0..=1.0).contains(&b) {
            return Err(SettingsError {
                key: "context.ranking.bm25_b",
                reason: format!("must be between 0 and 1; got {b}"),
            });
        }
        let share = self.max_term_share;
        if !(share > 0.0 && share <= 1.0) {
            return Err(SettingsError {
                key: "context.ranking.max_term_share",
                reason: format!("must be above 0 and at most 1; got {share}"),
            });
        }
        for (key, v, most) in [
            ("context.ranking.common_rerank", self.common_rerank, 1_000),
            ("context.ranking.repeats_widen", self.repeats_widen, 1_000),
            (
                "context.ranking.summary_sentences",
                self.summary_sentences,
                1_000,
            ),
            (
                "context.ranking.answer_sentences",
                self.answer_sentences,
                1_000,
            ),
        ] {
            positive(key, v as u64)?;
            if v > most {
                return Err(SettingsError {
                    key,
                    reason: format!("at most {most}"),
                });
            }
        }
        positive(
            "context.ranking.rare_related_df",
            self.rare_related_df as u64,
        )?;
        positive(
            "context.ranking.related_postings",
            self.related_postings as u64,
        )?;
        positive(
            "context.ranking.short_answer_tokens",
            self.short_answer_tokens as u64,
        )?;
        positive(
            "context.ranking.hit_answer_tokens",
            self.hit_answer_tokens as u64,
        )?;
        positive("context.ranking.min_cut_tokens", self.min_cut_tokens as u64)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_validate_and_nonsense_names_its_key() {
        assert_eq!(RankingSettings::default().validate(), Ok(()));
        let bad = |s: RankingSettings| s.validate().unwrap_err().key;
        let d = RankingSettings::DEFAULT;
        assert_eq!(
            bad(RankingSettings { bm25_b: 1.5, ..d }),
            "context.ranking.bm25_b"
        );
        assert_eq!(
            bad(RankingSettings {
                max_term_share: 0.0,
                ..d
            }),
            "context.ranking.max_term_share"
        );
        assert_eq!(
            bad(RankingSettings {
                answer_sentences: 0,
                ..d
            }),
            "context.ranking.answer_sentences"
        );
        assert_eq!(
            bad(RankingSettings {
                min_cut_tokens: 0,
                ..d
            }),
            "context.ranking.min_cut_tokens"
        );
        let mut settings = Settings::default();
        settings.context.ranking.common_rerank = 0;
        assert_eq!(
            settings.validate().unwrap_err().key,
            "context.ranking.common_rerank"
        );
    }
}
