// A chat host as a Node developer would write one against cairn's HTTP API: no cairn code, fetch and
// an SSE parser from npm. It creates a session with a tool its client runs, streams the turn, drops
// the connection after the first events, resumes with Last-Event-ID, runs the tool when the turn
// waits for it, and prints every event it saw (one JSON line) for the test to check against the log.
//
//   node client.mjs BASE_URL SESSION
import { createParser } from "eventsource-parser";

const [base, session] = process.argv.slice(2);
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city, from the user's own device.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

async function post(path, body) {
  const reply = await fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await reply.json();
  if (!reply.ok) throw new Error(`${path}: ${reply.status} ${JSON.stringify(answer)}`);
  return answer;
}

// Reads the session's stream from `lastId` until `stop(event)` says so, then hangs up.
async function stream(lastId, stop) {
  const controller = new AbortController();
  const headers = lastId === null ? {} : { "Last-Event-ID": lastId };
  const reply = await fetch(`${base}/v1/sessions/${session}/events`, { headers, signal: controller.signal });
  if (reply.status !== 200) throw new Error(`events: ${reply.status}`);
  const seen = [];
  let done = false;
  const parser = createParser({
    onEvent(event) {
      if (done) return;
      const item = { id: event.id, event: event.event, data: JSON.parse(event.data) };
      seen.push(item);
      done = stop(item, seen.length);
    },
  });
  const decoder = new TextDecoder();
  try {
    for await (const chunk of reply.body) {
      parser.feed(decoder.decode(chunk, { stream: true }));
      if (done) break;
    }
  } finally {
    controller.abort(); // drop the connection, as a client that lost its network would
  }
  return seen;
}

const accepted = await post(`/v1/sessions/${session}/messages`, {
  text: "What is the weather in Paris?",
  client_tools: [weather],
});
const events = [];
// 1: the first three events, then the connection drops
events.push(...(await stream(null, (_item, count) => count >= 3)));
let posted = false;
// 2: resumed after the last id seen; the tool runs here when the turn waits for it
while (!events.some((e) => e.event === "turn-completed")) {
  const lastId = events[events.length - 1].id;
  const more = await stream(lastId, (item) => {
    if (item.event === "tool-deferred" && item.data.tool_name === "get_weather" && !posted) {
      posted = true;
      post(`/v1/sessions/${session}/tools/${item.data.call_id}`, { content: "sunny, 24 C" }).catch((error) => {
        console.error(String(error));
        process.exit(3);
      });
    }
    return item.event === "turn-completed";
  });
  events.push(...more);
}
console.log(JSON.stringify({ accepted, events, resumed_after: events[2].id }));
