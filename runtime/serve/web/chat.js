// The chat page of `accord serve`: a conversation streamed token by token
// from the server's own /v1/chat/completions, with the API key where the
// server asks for one (api.js). No request leaves the page's origin.
//
// document.body.dataset.state says what the page does: "loading", "idle"
// or "generating" (the browser test waits on it).

import { api, errorText, eventData } from "./api.js";

const $ = (id) => document.getElementById(id);

const chat = {
  model: null, // the model's id, which requests name
  messages: [], // {role, content}, as the API takes them
  controller: null, // the AbortController of the reply being streamed
};

function setState(state) {
  document.body.dataset.state = state;
  const idle = state === "idle";
  $("send").disabled = !idle;
  $("stop").disabled = state !== "generating";
  $("regenerate").disabled = !idle || chat.messages.length === 0;
}

// Adds a message's view to the conversation; returns its text element.
function addMessage(role, content) {
  const view = document.createElement("div");
  view.className = `message ${role}`;
  const label = document.createElement("div");
  label.className = "role";
  label.textContent = role;
  const text = document.createElement("div");
  text.className = "text";
  text.textContent = content;
  view.append(label, text);
  $("messages").append(view);
  view.scrollIntoView({ block: "end" });
  return text;
}

function requestBody() {
  const body = { model: chat.model, messages: chat.messages, stream: true };
  const temperature = $("temperature").valueAsNumber;
  if (!Number.isNaN(temperature)) body.temperature = temperature;
  const maxTokens = $("max-tokens").valueAsNumber;
  if (!Number.isNaN(maxTokens)) body.max_tokens = maxTokens;
  return JSON.stringify(body);
}

// Streams the assistant's reply to the conversation so far. A reply that
// was stopped keeps what came; one that failed shows why and is not kept.
async function reply() {
  const text = addMessage("assistant", "");
  const answer = { role: "assistant", content: "" };
  chat.controller = new AbortController();
  setState("generating");
  try {
    const init = { method: "POST", headers: { "Content-Type": "application/json" }, body: requestBody() };
    const response = await api("v1/chat/completions", { ...init, signal: chat.controller.signal });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const data of eventData(response.body)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message);
      answer.content += chunk.choices?.[0]?.delta?.content ?? "";
      text.textContent = answer.content;
      text.scrollIntoView({ block: "end" });
    }
    chat.messages.push(answer);
  } catch (error) {
    if (error.name === "AbortError") {
      chat.messages.push(answer);
    } else {
      text.classList.add("error");
      text.textContent = `${answer.content}\n[${error.message}]`.trimStart();
      text.parentElement.classList.add("failed");
    }
  } finally {
    chat.controller = null;
    setState("idle");
  }
}

function send(event) {
  event.preventDefault();
  const prompt = $("prompt");
  if (document.body.dataset.state !== "idle" || prompt.value.trim() === "") return;
  chat.messages.push({ role: "user", content: prompt.value });
  addMessage("user", prompt.value);
  prompt.value = "";
  reply();
}

// Asks again for the last reply: the one shown (or the failure) goes.
function regenerate() {
  if (chat.messages.at(-1)?.role === "assistant") chat.messages.pop();
  const last = $("messages").lastElementChild;
  if (last?.classList.contains("assistant")) last.remove();
  if (chat.messages.length > 0) reply();
}

// The model's name and context, from /v1/models.
async function loadModel() {
  const response = await api("v1/models");
  if (!response.ok) throw new Error(await errorText(response));
  const model = (await response.json()).data[0];
  chat.model = model.id;
  $("model").textContent = model.id;
  if (model.max_model_len) {
    $("context").textContent = `context ${model.max_model_len} tokens`;
    $("max-tokens").max = model.max_model_len;
  }
}

function start() {
  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || event.shiftKey) return;
    event.preventDefault();
    $("composer").requestSubmit();
  });
  $("stop").addEventListener("click", () => chat.controller?.abort());
  $("regenerate").addEventListener("click", regenerate);
  loadModel().then(
    () => setState("idle"),
    (error) => {
      $("model").textContent = error.message;
      $("model").classList.add("error");
      document.body.dataset.state = "failed";
    },
  );
}

start();
