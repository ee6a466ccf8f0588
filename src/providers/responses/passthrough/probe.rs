//! What the gateway reads of a passed-through event without building it: its type, sequence
//! number and failure, and of the Response it carries, the usage, the error, and whether that
//! Response lacks a field every Response holds ([`spec`]), the only case in which the event
//! is built whole, completed and written again.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::providers::responses::spec;

/// An event, as far as the gateway reads it.
#[derive(Deserialize)]
pub struct EventProbe {
    #[serde(rename = "type")]
    pub kind: String,
    pub sequence_number: Option<u64>,
    pub response: Option<ResponseProbe>,
    pub message: Option<String>,
    pub error: Option<Value>,
}

/// The Response an event carries, as far as the gateway reads it.
#[derive(Default)]
pub struct ResponseProbe {
    pub usage: Option<Value>,
    pub error: Option<Value>,
    /// It lacks a field [`spec::complete`] adds.
    pub lacking: bool,
    /// Its `previous_response_id` is null (or absent): the provider was sent the whole input,
    /// so it cannot name the turn the client continued.
    pub no_previous: bool,
}

/// The fields [`spec::complete`] adds when missing, as bits of a mask.
fn held_bit(field: &str) -> Option<u32> {
    let index = spec::ECHOED
        .iter()
        .chain(&spec::STATE)
        .position(|f| *f == field)?;
    Some(1 << index)
}

const ALL_HELD: u32 = (1 << (spec::ECHOED.len() + spec::STATE.len())) - 1;

impl<'de> Deserialize<'de> for ResponseProbe {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ResponseVisitor)
    }
}

struct ResponseVisitor;

impl<'de> Visitor<'de> for ResponseVisitor {
    type Value = ResponseProbe;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Response object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ResponseProbe, A::Error> {
        let mut probe = ResponseProbe {
            no_previous: true,
            ..ResponseProbe::default()
        };
        let (mut held, mut tools_whole) = (0, true);
        while let Some(key) = map.next_key::<Key>()? {
            held |= key.held;
            match key.name {
                Name::Usage => probe.usage = map.next_value()?,
                Name::Error => probe.error = map.next_value()?,
                // Borrowed, not built: read again only for what its tools hold.
                Name::Tools => tools_whole = tools_are_whole(map.next_value::<&RawValue>()?),
                Name::Previous => {
                    probe.no_previous = map.next_value::<&RawValue>()?.get() == "null";
                }
                Name::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        probe.lacking = held != ALL_HELD || !tools_whole;
        Ok(probe)
    }
}

/// Whether every function tool in `tools` has `parameters` and `strict`. Tools that do not
/// read as a list of objects are left as they are, as whole.
fn tools_are_whole(tools: &RawValue) -> bool {
    serde_json::from_str::<Vec<ToolProbe>>(tools.get())
        .map_or(true, |tools| tools.iter().all(ToolProbe::whole))
}

#[derive(Deserialize)]
struct ToolProbe<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<&'a str>,
    #[serde(default)]
    parameters: Present,
    #[serde(default)]
    strict: Present,
}

impl ToolProbe<'_> {
    fn whole(&self) -> bool {
        self.kind != Some("function") || (self.parameters.0 && self.strict.0)
    }
}

/// A field that is there, whatever its value (null included).
#[derive(Default)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer)?;
        Ok(Present(true))
    }
}

/// A Response field's name, as the probe tells them apart.
struct Key {
    name: Name,
    /// Its bit in [`ALL_HELD`], or 0.
    held: u32,
}

enum Name {
    Usage,
    Error,
    Tools,
    Previous,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: serde::de::Error>(self, field: &str) -> Result<Key, E> {
        let name = match field {
            "usage" => Name::Usage,
            "error" => Name::Error,
            "tools" => Name::Tools,
            "previous_response_id" => Name::Previous,
            _ => Name::Other,
        };
        let held = held_bit(field).unwrap_or(0);
        Ok(Key { name, held })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(response: &str) -> ResponseProbe {
        serde_json::from_str(response).unwrap()
    }

    #[test]
    fn a_response_lacking_a_field_or_a_tools_field_is_told_apart() {
        let mut whole = serde_json::Map::new();
        for field in spec::ECHOED.iter().chain(&spec::STATE) {
            whole.insert((*field).into(), Value::Null);
        }
        whole.insert("usage".into(), serde_json::json!({"input_tokens": 2}));
        let text = Value::Object(whole.clone()).to_string();
        let read = probe(&text);
        assert!(!read.lacking);
        assert_eq!(read.usage.unwrap()["input_tokens"], 2);

        whole.remove("service_tier");
        assert!(probe(&Value::Object(whole.clone()).to_string()).lacking);
        whole.insert("service_tier".into(), "default".into());
        whole.insert(
            "tools".into(),
            serde_json::json!([{"type": "function", "name": "f", "strict": true}]),
        );
        assert!(probe(&Value::Object(whole.clone()).to_string()).lacking);
        whole.insert(
            "tools".into(),
            serde_json::json!([{"type": "function", "name": "f", "strict": null, "parameters": null},
                               {"type": "web_search"}, "not a tool"]),
        );
        assert!(
            !probe(&Value::Object(whole).to_string()).lacking,
            "tools that are no list of objects are left as they came"
        );
    }
}
