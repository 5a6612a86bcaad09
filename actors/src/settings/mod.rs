//! The settings tree. `config/default.toml` lists every key with its default;
//! the `recall` crate layers a user file and `RECALL_*` environment variables
//! over it and hands the result to the actors as arguments.
//!
//! Each section is a struct with its own `Default` (read for any key a
//! file leaves out: struct-level `#[serde(default)]`) and its own
//! `validate()`; unknown keys are refused as they are read
//! (`deny_unknown_fields`), and time zones and weekdays are typed, so a bad
//! one is an error at load naming its key.
//!
//! # Layout
//!
//! - `conversation`: session, context, watchdog, blocks, reflector.
//! - `ranking`: how a context read ranks and shows what it finds
//!   (`context.ranking`).
//! - `memory`: rollup, embed, search.
//! - `service`: server, log, store.
//! - `letta`: the Letta mirror.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::BlockLabel;

mod conversation;
mod letta;
mod memory;
mod ranking;
mod service;

pub use conversation::*;
pub use letta::{LettaAgent, LettaSettings};
pub use memory::*;
pub use ranking::RankingSettings;
pub use service::*;

/// Every setting, by section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub session: SessionSettings,
    pub reflector: ReflectorSettings,
    pub watchdog: WatchdogSettings,
    pub blocks: BlockSettings,
    pub store: StoreSettings,
    pub server: ServerSettings,
    pub log: LogSettings,
    pub context: ContextSettings,
    pub rollup: RollupSettings,
    pub embed: EmbedSettings,
    pub search: SearchSettings,
    pub letta: LettaSettings,
}

/// An IANA time zone (`Europe/Berlin`), read and written by its name; any
/// other name is an error naming the setting when the settings load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeZone(pub chrono_tz::Tz);

impl std::str::FromStr for TimeZone {
    type Err = String;
    fn from_str(name: &str) -> Result<Self, String> {
        name.parse()
            .map(TimeZone)
            .map_err(|_| format!("{name:?} is not an IANA time zone such as Europe/Berlin"))
    }
}

/// A day of the week (`monday`; any case, or `mon`), written in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weekday(pub chrono::Weekday);

impl std::str::FromStr for Weekday {
    type Err = String;
    fn from_str(name: &str) -> Result<Self, String> {
        name.parse()
            .map(Weekday)
            .map_err(|_| format!("{name:?} is not a weekday such as monday"))
    }
}

/// Serde for a type read from a string by `FromStr` and written by `$name`.
macro_rules! serde_by_name {
    ($t:ty, $name:expr) => {
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let name: fn(&$t) -> String = $name;
                s.serialize_str(&name(self))
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

serde_by_name!(TimeZone, |z| z.0.name().to_string());
serde_by_name!(Weekday, |w| match w.0 {
    chrono::Weekday::Mon => "monday",
    chrono::Weekday::Tue => "tuesday",
    chrono::Weekday::Wed => "wednesday",
    chrono::Weekday::Thu => "thursday",
    chrono::Weekday::Fri => "friday",
    chrono::Weekday::Sat => "saturday",
    chrono::Weekday::Sun => "sunday",
}
.to_string());

/// A setting with a value the runtime cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting `{key}`: {reason}")]
pub struct SettingsError {
    pub key: &'static str,
    pub reason: String,
}

fn positive(key: &'static str, v: u64) -> Result<(), SettingsError> {
    if v == 0 {
        return Err(SettingsError {
            key,
            reason: "must be greater than 0".into(),
        });
    }
    Ok(())
}

impl Settings {
    /// Settings for tests: every write flushed, short backoff.
    pub fn for_test() -> Self {
        let mut s = Settings::default();
        s.store.flush = FlushPolicy::EveryWrite;
        s.reflector.backoff_base_ms = 100;
        s.reflector.backoff_max_ms = 2_000;
        s
    }

    /// Rejects values the runtime cannot run with, naming the key: each
    /// section checks its own.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.session.validate()?;
        self.context.validate()?;
        self.watchdog.validate()?;
        self.reflector.validate()?;
        self.blocks.validate()?;
        self.store.validate()?;
        self.server.validate()?;
        self.rollup.validate()?;
        self.embed.validate()?;
        self.search.validate()?;
        self.log.validate()?;
        self.letta.validate()?;
        Ok(())
    }

    pub fn silence_timeout(&self) -> Duration {
        Duration::from_secs(self.session.silence_timeout_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        Settings::default().validate().unwrap();
        Settings::for_test().validate().unwrap();
    }

    #[test]
    fn zero_values_name_their_key() {
        let mut s = Settings::default();
        s.blocks.relationship_limit = 0;
        assert_eq!(s.validate().unwrap_err().key, "blocks.relationship_limit");
        let mut s = Settings::default();
        s.session.silence_timeout_secs = 0;
        assert_eq!(
            s.validate().unwrap_err().key,
            "session.silence_timeout_secs"
        );
    }

    #[test]
    fn max_prompt_tokens_is_unbounded_or_holds_the_prompts_own_text() {
        let mut s = Settings::default();
        s.reflector.openai.max_prompt_tokens = 0;
        s.validate().unwrap();
        s.reflector.openai.max_prompt_tokens = 500;
        assert_eq!(
            s.validate().unwrap_err().key,
            "reflector.openai.max_prompt_tokens"
        );
        s.reflector.openai.max_prompt_tokens = MIN_MAX_PROMPT_TOKENS;
        s.validate().unwrap();
    }

    #[test]
    fn time_zones_and_weekdays_are_typed() {
        let mut s = Settings::default();
        s.rollup
            .agent_time_zones
            .insert("kairix".into(), "Europe/Berlin".parse().unwrap());
        s.rollup.weekly_weekday = "Sunday".parse().unwrap();
        s.validate().unwrap();
        assert_eq!(
            s.rollup.time_zone_of("kairix"),
            chrono_tz::Tz::Europe__Berlin
        );
        assert_eq!(s.rollup.time_zone_of("other"), chrono_tz::Tz::UTC);
        assert_eq!(s.rollup.week_start(), chrono::Weekday::Sun);
        let bad = "Mars/Olympus".parse::<TimeZone>().unwrap_err();
        assert!(bad.contains("IANA"), "{bad}");
        assert!("someday".parse::<Weekday>().is_err());
        let json = serde_json::to_string(&s.rollup.weekly_weekday).unwrap();
        assert_eq!(json, "\"sunday\"");
        let mut s = Settings::default();
        s.rollup.daily_hour = 24;
        assert_eq!(s.validate().unwrap_err().key, "rollup.daily_hour");
    }
}
