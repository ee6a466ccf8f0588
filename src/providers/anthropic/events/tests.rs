use super::*;
use crate::providers::chat_chunks::stream::OpenAiSink;
use crate::providers::stream::Translating;
use crate::providers::stream::testing::{event, names, payloads, run};

/// The event sequence of Anthropic's streaming guide for a tool call, abridged.
fn tool_stream() -> Vec<SseEvent> {
    [
        ("message_start", r#"{"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_sequence":null,"usage":{"input_tokens":472,"output_tokens":2},"content":[],"stop_reason":null}}"#),
        ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#),
        ("ping", r#"{"type": "ping"}"#),
        ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay"}}"#),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        ("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}"#),
        ("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#),
        ("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}"#),
        ("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"San Francisco, CA\"}"}}"#),
        ("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
        ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ]
    .iter()
    .map(|(name, data)| event(Some(name), data))
    .collect()
}

#[test]
fn golden_tool_stream_as_openai_chunks() {
    let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(true));
    let (frames, state, usage) = run(&mut translator, &tool_stream(), false);
    assert_eq!(state, StreamState::Done);
    assert_eq!(
        usage,
        Some(Usage {
            prompt_tokens: 472,
            completion_tokens: 89
        })
    );
    let deltas: Vec<Value> = payloads(&frames)
        .into_iter()
        .map(|p| match p.get("choices").and_then(|c| c.get(0)) {
            Some(choice) => json!([choice["delta"], choice["finish_reason"]]),
            None => p.get("usage").cloned().unwrap_or(p),
        })
        .collect();
    assert_eq!(
        deltas,
        vec![
            json!([{"role": "assistant", "content": ""}, null]),
            json!([{"content": "Okay"}, null]),
            json!([{"tool_calls": [{"index": 0, "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}, null]),
            json!([{"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}, null]),
            json!([{"tool_calls": [{"index": 0, "function": {"arguments": "{\"location\":"}}]}, null]),
            json!([{"tool_calls": [{"index": 0, "function": {"arguments": " \"San Francisco, CA\"}"}}]}, null]),
            json!([{}, "tool_calls"]),
            json!({"prompt_tokens": 472, "completion_tokens": 89, "total_tokens": 561,
                   "prompt_tokens_details": {"cached_tokens": 0}}),
            json!("[DONE]"),
        ]
    );
    // The ping came through as a comment, which OpenAI's SDK skips.
    assert!(frames.iter().any(|f| f.starts_with(b": ping")));
}

#[test]
fn streamed_cache_reads_are_openais_cached_tokens() {
    let mut events = tool_stream();
    events[0] = event(
        Some("message_start"),
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":1800,"output_tokens":1},"content":[],"stop_reason":null}}"#,
    );
    let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(true));
    let (frames, _, usage) = run(&mut translator, &events, false);
    assert_eq!(usage.map(|u| u.prompt_tokens), Some(2010));
    let last_usage = payloads(&frames)
        .into_iter()
        .filter_map(|p| p.get("usage").filter(|u| u.is_object()).cloned())
        .next_back()
        .unwrap();
    assert_eq!(last_usage["prompt_tokens"], 2010);
    assert_eq!(last_usage["prompt_tokens_details"]["cached_tokens"], 1800);
}

#[test]
fn thinking_and_signatures_pass_unchanged_to_anthropic_clients() {
    let events: Vec<SseEvent> = [
        ("message_start", r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":1},"content":[],"stop_reason":null}}"#),
        ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#),
        ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think."}}"#),
        ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}"#),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}"#),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ]
    .iter()
    .map(|(name, data)| event(Some(name), data))
    .collect();
    let (frames, state, _) = run(&mut Passthrough::default(), &events, false);
    assert_eq!(state, StreamState::Done);
    let raw: Vec<_> = events.iter().map(|e| e.raw.clone()).collect();
    assert_eq!(frames, raw);
    // To an OpenAI client the thinking is not content.
    let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(false));
    let (frames, _, _) = run(&mut translator, &events, false);
    let text: String = frames
        .iter()
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    assert!(!text.contains("Let me think."), "{text}");
    assert!(!text.contains("EqQBCgIYAhIM"), "{text}");
}

#[test]
fn an_error_event_is_a_mid_stream_failure() {
    let events = [
        tool_stream()[0].clone(),
        event(
            Some("error"),
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
        ),
    ];
    let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(false));
    let (frames, state, _) = run(&mut translator, &events, false);
    assert_eq!(
        state,
        StreamState::UpstreamError {
            overloaded: true,
            message: "Overloaded".into()
        }
    );
    let last = payloads(&frames).pop().unwrap();
    assert_eq!(last["error"]["message"], "Overloaded");
    let (_, state, _) = run(&mut Passthrough::default(), &events, false);
    assert!(matches!(state, StreamState::UpstreamError { .. }));
}

#[test]
fn a_close_after_the_stop_reason_is_a_whole_answer() {
    // Everything up to `message_delta`, without `message_stop`.
    let events = &tool_stream()[..11];
    let (frames, state, _) = run(&mut Passthrough::default(), events, true);
    assert_eq!(state, StreamState::Done);
    assert_eq!(
        names(&frames).last().map(String::as_str),
        Some("message_stop")
    );
    let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(true));
    let (frames, state, usage) = run(&mut translator, events, true);
    assert_eq!(state, StreamState::Done);
    assert_eq!(payloads(&frames).last(), Some(&json!("[DONE]")));
    assert_eq!(usage.map(|u| u.completion_tokens), Some(89));
    // Cut before the stop reason, it is a truncation.
    let (_, state, _) = run(&mut Passthrough::default(), &tool_stream()[..10], true);
    assert_eq!(state, StreamState::Truncated);
    let mut translator = Translating::new(AnthropicSource::default(), OpenAiSink::new(true));
    let (_, state, _) = run(&mut translator, &tool_stream()[..10], true);
    assert_eq!(state, StreamState::Truncated);
}

#[test]
fn the_passthrough_forwards_raw_events_and_reads_usage() {
    let events = tool_stream();
    let (frames, state, usage) = run(&mut Passthrough::default(), &events, false);
    assert_eq!(state, StreamState::Done);
    assert_eq!(frames.len(), events.len());
    assert_eq!(frames[0], events[0].raw);
    assert_eq!(
        usage,
        Some(Usage {
            prompt_tokens: 472,
            completion_tokens: 89
        })
    );
}
