//! [`InboundConfig`]: the settings of an [`InboundLayer`] that are plain data.

use std::time::Duration;

use http::HeaderName;
use serde::{Deserialize, Serialize};

use super::header_name;
use crate::inbound::InboundLayer;

/// The settings of an [`InboundLayer`] that are plain data, each optional: a setting left out
/// keeps the layer's default. Each key is the layer setter of the same name; see the
/// [module docs](super) for the file form.
///
/// The layer checks nothing when it is made (every value is a valid setting), so neither does
/// this: [`apply`](Self::apply) cannot fail. A malformed duration or header name is the format
/// crate's error when the file is read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct InboundConfig {
    /// The name admission components see as the policy ([`InboundLayer::name`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A received deadline above it is ignored ([`InboundLayer::maximum`]).
    #[serde(default, with = "rampart::config::with::duration")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum: Option<Duration>,
    /// The timeout of a request that brings no deadline ([`InboundLayer::default_timeout`]).
    #[serde(default, with = "rampart::config::with::duration")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_timeout: Option<Duration>,
    /// The time this service needs to answer ([`InboundLayer::reserve`]).
    #[serde(default, with = "rampart::config::with::duration")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserve: Option<Duration>,
    /// Answers 504 without running the handler when the request arrives expired
    /// ([`InboundLayer::reject_expired`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject_expired: Option<bool>,
    /// Drops the handler's future at the deadline ([`InboundLayer::enforce`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce: Option<bool>,
    /// Reports what `reject_expired` and `admit` would refuse, refuses nothing
    /// ([`InboundLayer::dry_run`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// The deadline header ([`InboundLayer::deadline_header`]).
    #[serde(default, with = "header_name", skip_serializing_if = "Option::is_none")]
    pub deadline_header: Option<HeaderName>,
    /// The criticality header ([`InboundLayer::criticality_header`]).
    #[serde(default, with = "header_name", skip_serializing_if = "Option::is_none")]
    pub criticality_header: Option<HeaderName>,
    /// The retry-mark header ([`InboundLayer::retry_header`]).
    #[serde(default, with = "header_name", skip_serializing_if = "Option::is_none")]
    pub retry_header: Option<HeaderName>,
}

impl InboundConfig {
    /// `layer` with these settings: what it holds that has no configuration form (an
    /// admission component, a clock, listeners) is kept, each setting given here replaces the
    /// layer's, each one left out keeps it.
    ///
    /// ```
    /// use rampart_http::InboundLayer;
    /// use rampart_http::config::InboundConfig;
    ///
    /// let config: InboundConfig = toml::from_str(r#"
    ///     default_timeout = "2s"
    ///     reserve = "20ms"
    ///     reject_expired = true
    /// "#)?;
    /// let layer = config.apply(InboundLayer::new().listener(|event| println!("{event:?}")));
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn apply<A>(&self, mut layer: InboundLayer<A>) -> InboundLayer<A> {
        if let Some(name) = &self.name {
            layer = layer.name(name);
        }
        if let Some(maximum) = self.maximum {
            layer = layer.maximum(maximum);
        }
        if let Some(deadline) = self.default_timeout {
            layer = layer.default_timeout(deadline);
        }
        if let Some(reserve) = self.reserve {
            layer = layer.reserve(reserve);
        }
        if let Some(on) = self.reject_expired {
            layer = layer.reject_expired(on);
        }
        if let Some(on) = self.enforce {
            layer = layer.enforce(on);
        }
        if let Some(on) = self.dry_run {
            layer = layer.dry_run(on);
        }
        if let Some(name) = &self.deadline_header {
            layer = layer.deadline_header(name.clone());
        }
        if let Some(name) = &self.criticality_header {
            layer = layer.criticality_header(name.clone());
        }
        if let Some(name) = &self.retry_header {
            layer = layer.retry_header(name.clone());
        }
        layer
    }

    /// The key paths, under `inbound.`, of the settings that differ in `next`.
    pub(super) fn changes(&self, next: &InboundConfig, changed: &mut Vec<String>) {
        let mut differs = |key: &str, differs: bool| {
            if differs {
                changed.push(format!("inbound.{key}"));
            }
        };
        differs("name", self.name != next.name);
        differs("maximum", self.maximum != next.maximum);
        differs(
            "default_timeout",
            self.default_timeout != next.default_timeout,
        );
        differs("reserve", self.reserve != next.reserve);
        differs("reject_expired", self.reject_expired != next.reject_expired);
        differs("enforce", self.enforce != next.enforce);
        differs("dry_run", self.dry_run != next.dry_run);
        differs(
            "deadline_header",
            self.deadline_header != next.deadline_header,
        );
        differs(
            "criticality_header",
            self.criticality_header != next.criticality_header,
        );
        differs("retry_header", self.retry_header != next.retry_header);
    }
}
