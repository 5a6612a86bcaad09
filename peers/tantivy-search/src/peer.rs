//! The peer: a tantivy index over the same summaries, BM25 only.
//!
//! Its text field is split by recall's own tokenizer
//! ([`recall::engine::lang::tokens`], registered as a tantivy tokenizer),
//! so both sides score the same terms and a difference in the top 10 comes
//! from the engines, not from stemming or stopwords. The index is one
//! segment in RAM, built by one thread as recall builds its index.

use recall::engine::lang::tokens;
use recall::engine::model::ConversationSummary;
use tantivy::collector::TopDocs;
use tantivy::columnar::Column;
use tantivy::query::{
    BooleanQuery, ConstScoreQuery, Occur, Query, QueryParser, TermQuery, TermSetQuery,
};
use tantivy::schema::{
    Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions, STRING,
};
use tantivy::tokenizer::{TextAnalyzer, Token, TokenStream, Tokenizer};
use tantivy::{Index, IndexReader, ReloadPolicy, Score, Searcher, Term};

/// recall's tokens as a tantivy tokenizer.
#[derive(Clone)]
struct RecallTokenizer;

struct RecallTokens {
    tokens: Vec<Token>,
    at: usize,
}

impl Tokenizer for RecallTokenizer {
    type TokenStream<'a> = RecallTokens;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> RecallTokens {
        let tokens = tokens(text)
            .enumerate()
            .map(|(position, text)| Token {
                offset_from: 0,
                offset_to: 0,
                position,
                text,
                position_length: 1,
            })
            .collect();
        RecallTokens { tokens, at: 0 }
    }
}

impl TokenStream for RecallTokens {
    fn advance(&mut self) -> bool {
        self.at += 1;
        self.at <= self.tokens.len()
    }

    fn token(&self) -> &Token {
        &self.tokens[self.at - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.at - 1]
    }
}

pub struct Peer {
    searcher: Searcher,
    parser: QueryParser,
    user: Field,
    number: Field,
    /// Each segment's column of summary numbers.
    numbers: Vec<Column<u64>>,
}

/// A hit: the summary's number (its position in the corpus) and its BM25.
pub type Hit = (u64, Score);

impl Peer {
    /// Indexes the summaries: the text recall indexes (summary, topics,
    /// key entities), the user as a raw term, and the summary's number.
    pub fn build(summaries: &[ConversationSummary]) -> tantivy::Result<Peer> {
        let mut schema = Schema::builder();
        let text = schema.add_text_field(
            "text",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("recall")
                    .set_index_option(IndexRecordOption::WithFreqs),
            ),
        );
        let user = schema.add_text_field("user", STRING);
        let number = schema.add_u64_field("n", NumericOptions::default().set_indexed().set_fast());
        let index = Index::create_in_ram(schema.build());
        index
            .tokenizers()
            .register("recall", TextAnalyzer::from(RecallTokenizer));
        // One thread and room for everything in one segment.
        let mut writer = index.writer_with_num_threads(1, 1_000_000_000)?;
        for (i, s) in summaries.iter().enumerate() {
            let mut doc = tantivy::TantivyDocument::default();
            doc.add_text(
                text,
                format!(
                    "{}\n{}\n{}",
                    s.summary_text,
                    s.topics.join(" "),
                    s.key_entities.join(" ")
                ),
            );
            doc.add_text(user, &s.user_id);
            doc.add_u64(number, i as u64);
            writer.add_document(doc)?;
        }
        writer.commit()?;
        writer.wait_merging_threads()?;
        let reader: IndexReader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let searcher = reader.searcher();
        let numbers = searcher
            .segment_readers()
            .iter()
            .map(|s| s.fast_fields().u64("n"))
            .collect::<tantivy::Result<_>>()?;
        let parser = QueryParser::for_index(&index, vec![text]);
        Ok(Peer {
            searcher,
            parser,
            user,
            number,
            numbers,
        })
    }

    pub fn segments(&self) -> usize {
        self.searcher.segment_readers().len()
    }

    pub fn docs(&self) -> u64 {
        self.searcher.num_docs()
    }

    /// The index's size as tantivy counts it.
    pub fn bytes(&self) -> u64 {
        self.searcher
            .space_usage()
            .map(|u| u.total().get_bytes())
            .unwrap_or(0)
    }

    /// The query's words (any of them, BM25), only `user`'s summaries when
    /// given: the user term scores 0, so a hit's score is its BM25.
    fn query(&self, q: &str, user: Option<&str>) -> tantivy::Result<Box<dyn Query>> {
        let words = self.parser.parse_query(q)?;
        Ok(match user {
            Some(u) => Box::new(BooleanQuery::new(vec![
                (Occur::Must, words),
                (
                    Occur::Must,
                    Box::new(ConstScoreQuery::new(
                        Box::new(TermQuery::new(
                            Term::from_field_text(self.user, u),
                            IndexRecordOption::Basic,
                        )),
                        0.0,
                    )),
                ),
            ])),
            None => words,
        })
    }

    /// The `limit` best hits, best first (ties: the earlier-indexed first,
    /// tantivy's rule).
    pub fn search(&self, q: &str, user: Option<&str>, limit: usize) -> tantivy::Result<Vec<Hit>> {
        let query = self.query(q, user)?;
        let top = self
            .searcher
            .search(&query, &TopDocs::with_limit(limit).order_by_score())?;
        Ok(self.hits(top))
    }

    /// Search results as (summary number, score).
    fn hits(&self, top: Vec<(f32, tantivy::DocAddress)>) -> Vec<Hit> {
        top.into_iter()
            .map(|(score, at)| {
                let n = self
                    .numbers
                    .get(at.segment_ord as usize)
                    .and_then(|c| c.first(at.doc_id))
                    .unwrap_or(u64::MAX);
                (n, score)
            })
            .collect()
    }

    /// tantivy's BM25 of the given summaries for the query (those that
    /// match it): how it would rank what the other side returned.
    pub fn scores_of(
        &self,
        q: &str,
        user: Option<&str>,
        numbers: &[u64],
    ) -> tantivy::Result<Vec<Hit>> {
        if numbers.is_empty() {
            return Ok(Vec::new());
        }
        let only = TermSetQuery::new(
            numbers
                .iter()
                .map(|&n| Term::from_field_u64(self.number, n)),
        );
        let query = BooleanQuery::new(vec![
            (Occur::Must, self.query(q, user)?),
            (
                Occur::Must,
                Box::new(ConstScoreQuery::new(Box::new(only), 0.0)),
            ),
        ]);
        let top = self
            .searcher
            .search(&query, &TopDocs::with_limit(numbers.len()).order_by_score())?;
        Ok(self.hits(top))
    }
}
