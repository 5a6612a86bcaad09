//! Listings that stop at their limit: sessions newest first by start
//! time, an agent's summaries newest first by period end, an agent's dead
//! letters oldest first. Each walks keys already in the listing's order
//! (an index, or the summaries' own keys) and reads a record only once
//! its key passes the filters the key can tell, so a page costs about
//! what it returns, not what the folder holds.

use std::iter::Peekable;

use super::*;

type Entry = ::sled::Result<(::sled::IVec, ::sled::IVec)>;
type Stream<'a> = Box<dyn Iterator<Item = Entry> + 'a>;

/// The keys of `tree` under `prefix`, backwards (newest first when they
/// end in a [`keys::order_tail`]): only those before the tail `before`,
/// and from the key `prefix` + `from` on.
fn backwards<'a>(
    tree: &'a ::sled::Tree,
    prefix: Vec<u8>,
    before: Option<&[u8]>,
    from: Option<&[u8]>,
) -> Stream<'a> {
    let lowest = [&prefix[..], from.unwrap_or_default()].concat();
    let keys: Stream<'a> = match before {
        // Every key from the prefix up to the prefix and the tail starts
        // with the prefix.
        Some(tail) => Box::new(
            tree.range(prefix.clone()..[&prefix[..], tail].concat())
                .rev(),
        ),
        None => Box::new(tree.scan_prefix(&prefix).rev()),
    };
    Box::new(keys.take_while(move |e| {
        e.as_ref()
            .map_or(true, |(k, _)| k.as_ref() >= lowest.as_slice())
    }))
}

/// Several streams, each newest first by its keys' [`keys::tail_of`],
/// read as one newest first.
struct NewestFirst<'a> {
    streams: Vec<Peekable<Stream<'a>>>,
}

impl<'a> NewestFirst<'a> {
    fn new(streams: Vec<Stream<'a>>) -> Self {
        NewestFirst {
            streams: streams.into_iter().map(Iterator::peekable).collect(),
        }
    }
}

impl Iterator for NewestFirst<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        let mut newest: Option<(usize, Vec<u8>)> = None;
        for (i, s) in self.streams.iter_mut().enumerate() {
            let tail = match s.peek() {
                None => continue,
                Some(Err(_)) => return s.next(),
                Some(Ok((k, _))) => keys::tail_of(k),
            };
            if newest.as_ref().is_none_or(|(_, t)| tail > t.as_slice()) {
                newest = Some((i, tail.to_vec()));
            }
        }
        self.streams[newest?.0].next()
    }
}

impl Trees {
    pub fn list_sessions(&self, q: &SessionListing) -> Result<Vec<SessionRecord>, StoreError> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        if q.live == Some(true) {
            return self.list_live_sessions(q);
        }
        let before = q.before.map(|(t, id)| keys::order_tail(t, id));
        let before = before.as_ref().map(|b| &b[..]);
        // One stream per agent asked for (each in start order); every
        // agent's family otherwise, its values telling the user.
        let agents: Option<BTreeSet<&str>> = q
            .agents
            .as_ref()
            .map(|a| a.iter().map(String::as_str).collect());
        let streams: Vec<Stream<'_>> = match (&agents, &q.user_id) {
            (Some(agents), Some(user)) => agents
                .iter()
                .map(|a| {
                    let prefix = keys::user_sessions_prefix(a, user);
                    backwards(&self.user_sessions, prefix, before, None)
                })
                .collect(),
            (Some(agents), None) => agents
                .iter()
                .map(|a| {
                    let prefix = keys::session_starts_prefix(Some(a));
                    backwards(&self.session_starts, prefix, before, None)
                })
                .collect(),
            (None, _) => {
                let prefix = keys::session_starts_prefix(None);
                vec![backwards(&self.session_starts, prefix, before, None)]
            }
        };
        let by_owner = agents.is_none() && q.user_id.is_some();
        let mut out = Vec::new();
        for entry in NewestFirst::new(streams) {
            let (k, v) = entry?;
            if by_owner {
                let user = q.user_id.as_deref().unwrap_or_default();
                if keys::owner_parts(&v).is_none_or(|(_, u)| u != user.as_bytes()) {
                    continue;
                }
            }
            let Some(id) = keys::tail_id(&k) else {
                self.skip(keys::TREE_SESSION_STARTS, &k, "the key is not an index key");
                continue;
            };
            if q.live == Some(false) && self.open.contains_key(id.as_bytes())? {
                continue;
            }
            if let Some(rec) = self.session(id)? {
                out.push(rec);
                if out.len() == q.limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// The live sessions a listing asks for: the open ones (as many as
    /// the live-session caps allow), sorted here.
    fn list_live_sessions(&self, q: &SessionListing) -> Result<Vec<SessionRecord>, StoreError> {
        let before = q.before.map(|(t, id)| keys::order_tail(t, id));
        let mut out = self.open_sessions()?;
        out.retain(|s| {
            q.agents.as_ref().is_none_or(|a| a.contains(&s.agent_id))
                && q.user_id.as_deref().is_none_or(|u| s.user_id == u)
                && before.is_none_or(|b| keys::order_tail(s.started_at, s.session_id) < b)
        });
        out.sort_by_key(|s| std::cmp::Reverse(keys::order_tail(s.started_at, s.session_id)));
        out.truncate(q.limit);
        Ok(out)
    }

    /// An agent's summaries newest first: its summaries of each type are
    /// keyed by period end already, so the types' keys are read backwards
    /// together.
    pub fn list_summaries(
        &self,
        agent_id: &str,
        q: &SummaryListing,
    ) -> Result<Vec<ConversationSummary>, StoreError> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let before = q.before.map(|(t, id)| keys::order_tail(t, id));
        let from = q.since.map(keys::time_key_of);
        let kinds = match q.kind {
            Some(k) => vec![k],
            None => SummaryType::ALL.to_vec(),
        };
        let streams = kinds
            .into_iter()
            .map(|kind| {
                backwards(
                    &self.summaries,
                    keys::summaries_prefix(agent_id, kind),
                    before.as_ref().map(|b| &b[..]),
                    from.as_ref().map(|f| &f[..]),
                )
            })
            .collect();
        let mut out = Vec::new();
        for entry in NewestFirst::new(streams) {
            let (k, v) = entry?;
            let Some(s) = self.decode::<ConversationSummary>(keys::TREE_SUMMARIES, &k, &v) else {
                continue;
            };
            // The key holds the period end to the millisecond; the rest is
            // in the record.
            if q.admits(&s) {
                out.push(s);
                if out.len() == q.limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Up to `limit` of an agent's dead letters, oldest first.
    pub fn agent_dead_letters(
        &self,
        agent_id: &str,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        use std::ops::Bound;
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let prefix = keys::agent_dead_letters_prefix(agent_id);
        let start = match after {
            Some((at, id)) => {
                let mut k = prefix.clone();
                k.extend_from_slice(&keys::order_tail(at, id));
                Bound::Excluded(k)
            }
            None => Bound::Included(prefix.clone()),
        };
        for item in self
            .agent_dead_letters
            .range::<Vec<u8>, _>((start, Bound::Unbounded))
        {
            let (k, _) = item?;
            if !k.starts_with(&prefix) {
                break;
            }
            let Some(id) = keys::tail_id(&k) else {
                self.skip(
                    keys::TREE_AGENT_DEAD_LETTERS,
                    &k,
                    "the key is not an index key",
                );
                continue;
            };
            if let Some(letter) = self.find_dead_letter(id)? {
                out.push(letter);
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }
}
