// One scenario of the Vercel AI SDK's default OpenAI provider (`openai("...")`, which
// speaks the Responses API) against the gateway: `node responses.mjs BASE_URL SCENARIO MODEL`.
// Prints what the SDK returned as one JSON line; tests/sdk/test_vercel_ai_sdk.py checks it.
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const [baseURL, scenario, modelId] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey: "sk-anything" });
const model = openai(modelId);

const scenarios = {
  async text() {
    const result = await generateText({ model, prompt: "Hello", maxRetries: 0 });
    return { text: result.text, outputTokens: result.usage.outputTokens, provider: result.response.headers["x-switchyard-provider"] };
  },
  async stream() {
    const result = streamText({ model, prompt: "Count", maxRetries: 0 });
    let text = "";
    for await (const delta of result.textStream) text += delta;
    return { text, finishReason: await result.finishReason };
  },
  async object() {
    const result = await generateObject({ model, prompt: "Which city?", schema: z.object({ city: z.string() }), maxRetries: 0 });
    return { object: result.object };
  },
  async tools() {
    const result = await generateText({
      model,
      prompt: "Weather in Oslo?",
      maxRetries: 0,
      stopWhen: stepCountIs(2),
      tools: {
        get_weather: tool({
          description: "Weather in a city",
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => `sunny in ${city}`,
        }),
      },
    });
    const calls = result.steps.flatMap((step) => step.toolCalls.map((call) => ({ name: call.toolName, input: call.input })));
    return { text: result.text, calls };
  },
  async broken() {
    const result = streamText({ model, prompt: "Hello", maxRetries: 0, onError: () => {} });
    let text = "";
    const errors = [];
    for await (const part of result.fullStream) {
      if (part.type === "text-delta") text += part.text;
      if (part.type === "error") errors.push(String(part.error?.message ?? part.error));
    }
    return { text, errors };
  },
};

try {
  console.log(JSON.stringify({ ok: await scenarios[scenario]() }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error?.message ?? error), name: error?.name ?? null }));
}
