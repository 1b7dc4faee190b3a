// Tern chat page: streams replies from POST /v1/chat/completions (server-sent events read with
// fetch), shows reasoning and tool calls apart from the answer, and keeps the conversation in
// localStorage. Plain JS, nothing loaded from elsewhere: it works offline.
'use strict';

// ---------- Storage: JSON in localStorage; the page keeps working in memory if it is unavailable.

const KEYS = {
  chat: 'tern.chat.v1',
  apiKey: 'tern.apiKey',
  model: 'tern.model',
  settings: 'tern.settings',
};

function load(key, fallback) {
  try {
    const value = localStorage.getItem(key);
    return value === null ? fallback : JSON.parse(value);
  } catch {
    return fallback;
  }
}

function save(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch {
    // storage full or disabled: the conversation lives on in memory
  }
}

// ---------- State

const $ = (selector) => document.querySelector(selector);
const ui = {
  model: $('#model'),
  apiKey: $('#api-key'),
  system: $('#system'),
  temperature: $('#temperature'),
  maxTokens: $('#max-tokens'),
  newChat: $('#new-chat'),
  banner: $('#banner'),
  messages: $('#messages'),
  form: $('#composer'),
  input: $('#input'),
  send: $('#send'),
  stop: $('#stop'),
};

// Messages as shown: {role: 'user', content} or {role: 'assistant', content, reasoning,
// tool_calls: [{id, name, arguments}], usage, finish, timing, error, stopped, pending}.
let conversation = load(KEYS.chat, []);
let controller = null;  // aborts the reply being streamed
const views = new WeakMap();  // message -> its elements on the page

// ---------- Talking to the server

function authHeaders() {
  const key = ui.apiKey.value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// The message of an error response: the server's {error: {message}} when there is one.
async function errorText(response) {
  const body = await response.text().catch(() => '');
  try {
    const message = JSON.parse(body)?.error?.message;
    if (message) return `${response.status}: ${message}`;
  } catch {
    // not JSON: show the text as it is
  }
  return `${response.status} ${response.statusText}${body ? `: ${body.slice(0, 300)}` : ''}`;
}

function networkError(error) {
  return error instanceof TypeError ? `cannot reach the server (${error.message})` : error.message;
}

async function loadModels() {
  showBanner('');
  let models = [];
  try {
    const response = await fetch('/v1/models', { headers: authHeaders() });
    if (!response.ok) throw new Error(await errorText(response));
    models = (await response.json()).data ?? [];
  } catch (error) {
    showBanner(`Cannot list the models: ${networkError(error)}`);
  }
  const wanted = ui.model.value || load(KEYS.model, '');
  ui.model.replaceChildren(...models.map((m) => {
    const option = element('option', '', m.id);
    option.value = m.id;
    return option;
  }));
  if (models.some((m) => m.id === wanted)) ui.model.value = wanted;
  ui.model.disabled = models.length === 0;
}

// The request's messages: the conversation so far, without exchanges that produced nothing
// (an error, or a stop before any text), so roles keep alternating.
function apiMessages(messages) {
  const out = [];
  const system = ui.system.value.trim();
  if (system) out.push({ role: 'system', content: system });
  for (const m of messages) {
    if (m.role === 'user') {
      out.push({ role: 'user', content: m.content });
    } else if (m.content) {
      out.push({ role: 'assistant', content: m.content });
    } else if (out.at(-1)?.role === 'user') {
      out.pop();
    }
  }
  return out;
}

function requestBody(messages) {
  const body = {
    messages: apiMessages(messages),
    stream: true,
    stream_options: { include_usage: true },
  };
  if (ui.model.value) body.model = ui.model.value;
  const temperature = parseFloat(ui.temperature.value);
  if (Number.isFinite(temperature)) body.temperature = temperature;
  const maxTokens = parseInt(ui.maxTokens.value, 10);
  if (maxTokens > 0) body.max_tokens = maxTokens;
  return body;
}

// Reads a server-sent-event stream: onData(data) for each event, then onBatch() after each
// network read, so the page redraws once per read rather than once per event.
async function readEvents(response, onData, onBatch) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    const events = buffer.split(/\r?\n\r?\n/);
    buffer = events.pop();  // an event not yet complete
    for (const event of events) {
      const data = event.split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data) onData(data);
    }
    onBatch();
  }
}

// Folds one chat.completion.chunk (or an error event) into the reply.
function applyChunk(reply, chunk) {
  if (chunk.error) {
    reply.error = chunk.error.message ?? JSON.stringify(chunk.error);
    return;
  }
  if (chunk.usage) reply.usage = chunk.usage;
  for (const choice of chunk.choices ?? []) {
    const delta = choice.delta ?? {};
    if (delta.content) reply.content += delta.content;
    const thought = delta.reasoning_content ?? delta.reasoning;
    if (thought) reply.reasoning += thought;
    for (const part of delta.tool_calls ?? []) mergeToolCall(reply.tool_calls, part);
    if (choice.finish_reason) reply.finish = choice.finish_reason;
  }
}

// Tool calls arrive in pieces: the first names the call, the rest append to its arguments.
function mergeToolCall(calls, part) {
  const call = (calls[part.index ?? calls.length] ??= { id: '', name: '', arguments: '' });
  if (part.id) call.id = part.id;
  if (part.function?.name) call.name += part.function.name;
  if (part.function?.arguments) call.arguments += part.function.arguments;
}

// ---------- The conversation

async function send(text) {
  const user = { role: 'user', content: text };
  const reply = { role: 'assistant', content: '', reasoning: '', tool_calls: [], pending: true };
  conversation.push(user, reply);
  save(KEYS.chat, conversation);
  showMessage(user);
  showMessage(reply);
  scrollToEnd(true);

  controller = new AbortController();
  setBusy(true);
  const started = performance.now();
  let firstToken = 0;
  try {
    const response = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...authHeaders() },
      body: JSON.stringify(requestBody(conversation.slice(0, -1))),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    await readEvents(response, (data) => {
      if (data === '[DONE]') return;
      applyChunk(reply, JSON.parse(data));
      if (!firstToken && (reply.content || reply.reasoning || reply.tool_calls.length)) {
        firstToken = performance.now();
      }
    }, () => {
      const atEnd = nearEnd();
      updateMessage(reply);
      scrollToEnd(atEnd);
    });
  } catch (error) {
    if (error.name === 'AbortError') reply.stopped = true;
    else reply.error = networkError(error);
  }
  const ended = performance.now();
  reply.timing = {
    total: (ended - started) / 1000,
    firstToken: firstToken ? (firstToken - started) / 1000 : null,
    decode: firstToken ? (ended - firstToken) / 1000 : null,
  };
  delete reply.pending;
  controller = null;
  setBusy(false);
  const atEnd = nearEnd();
  updateMessage(reply);
  scrollToEnd(atEnd);
  save(KEYS.chat, conversation);
}

function stopReply() {
  if (controller) controller.abort();
}

function newChat() {
  stopReply();
  conversation = [];
  save(KEYS.chat, conversation);
  ui.messages.replaceChildren();
  ui.input.focus();
}

function setBusy(busy) {
  ui.send.hidden = busy;
  ui.stop.hidden = !busy;
}

// ---------- Rendering (text goes in as text nodes: nothing from a reply is parsed as HTML)

function element(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function showBanner(text) {
  ui.banner.textContent = text;
  ui.banner.hidden = !text;
}

function showMessage(message) {
  const root = element('article', `msg ${message.role}`);
  const parts = { root, content: element('div', 'content') };
  if (message.role === 'assistant') {
    parts.thinking = element('details', 'thinking');
    parts.summary = element('summary');
    parts.thought = element('pre');
    parts.thinking.append(parts.summary, parts.thought);
    parts.tools = element('div', 'tools');
    parts.error = element('div', 'error');
    parts.meta = element('div', 'meta');
    root.append(parts.thinking, parts.tools, parts.content, parts.error, parts.meta);
  } else {
    root.append(parts.content);
  }
  views.set(message, parts);
  ui.messages.append(root);
  updateMessage(message);
}

function updateMessage(message) {
  const parts = views.get(message);
  if (!parts) return;  // a message of a chat already cleared
  if (message.role === 'user') {
    parts.content.textContent = message.content;
    return;
  }
  const streaming = Boolean(message.pending);
  parts.root.classList.toggle('streaming', streaming);
  parts.thinking.hidden = !message.reasoning;
  parts.summary.textContent = streaming && !message.content ? 'Thinking…' : 'Thoughts';
  parts.thought.textContent = message.reasoning;
  parts.tools.replaceChildren(...message.tool_calls.map(toolCard));
  renderText(parts.content, message.content);
  parts.error.hidden = !message.error;
  parts.error.textContent = message.error ?? '';
  parts.meta.textContent = streaming ? '' : summaryLine(message);
}

function toolCard(call) {
  const card = element('div', 'tool-call');
  let args = call.arguments;
  try {
    args = JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    // arguments still arriving (or not JSON): show them as they are
  }
  card.append(element('div', 'tool-name', call.name || '(unnamed)'), element('pre', '', args));
  return card;
}

// Plain text with ``` fenced code blocks and `inline code`.
function renderText(parent, text) {
  const blocks = [];
  let prose = [];
  let code = null;  // {lang, lines} while inside a fence
  const endProse = () => {
    const joined = prose.join('\n').replace(/^\n+|\n+$/g, '');
    if (joined) blocks.push(proseBlock(joined));
    prose = [];
  };
  for (const line of text.split('\n')) {
    const fence = line.match(/^\s*```\s*([\w+#.-]*)\s*$/);
    if (code && fence && !fence[1]) {
      blocks.push(codeBlock(code));
      code = null;
    } else if (code) {
      code.lines.push(line);
    } else if (fence) {
      endProse();
      code = { lang: fence[1], lines: [] };
    } else {
      prose.push(line);
    }
  }
  endProse();
  if (code) blocks.push(codeBlock(code));  // a fence still open while streaming
  parent.replaceChildren(...blocks);
}

function proseBlock(text) {
  const block = element('div', 'prose');
  // Odd pieces are the `inline code` captured by the split.
  text.split(/(`[^`\n]+`)/).forEach((piece, i) => {
    block.append(i % 2 ? element('code', '', piece.slice(1, -1)) : document.createTextNode(piece));
  });
  return block;
}

function codeBlock({ lang, lines }) {
  const pre = element('pre', 'code-block');
  pre.dataset.lang = lang;
  pre.append(element('code', '', lines.join('\n')));
  return pre;
}

// Under each reply: tokens, speed, time to the first token; or why it ended early.
function summaryLine(message) {
  const t = message.timing;
  const pieces = [];
  if (message.stopped) pieces.push(t ? `stopped after ${t.total.toFixed(1)} s` : 'stopped');
  const u = message.usage;
  if (u) {
    const cached = u.prompt_tokens_details?.cached_tokens;
    pieces.push(`${u.prompt_tokens} prompt${cached ? ` (${cached} cached)` : ''} + ` +
                `${u.completion_tokens} completion tokens`);
    if (t?.decode > 0 && u.completion_tokens > 1) {
      pieces.push(`${((u.completion_tokens - 1) / t.decode).toFixed(1)} tok/s`);
    }
    if (t?.firstToken != null) pieces.push(`${t.firstToken.toFixed(2)} s to first token`);
  }
  if (message.finish === 'length') pieces.push('cut at the token limit');
  return pieces.join(' · ');
}

function nearEnd() {
  const m = ui.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
}

function scrollToEnd(really) {
  if (really) ui.messages.scrollTop = ui.messages.scrollHeight;
}

// ---------- Wiring

function start() {
  // A reply still streaming when the page went away is kept as stopped.
  for (const m of conversation) {
    if (m.pending) {
      delete m.pending;
      m.stopped = true;
    }
  }
  conversation.forEach(showMessage);
  scrollToEnd(true);

  ui.apiKey.value = load(KEYS.apiKey, '');
  const settings = load(KEYS.settings, {});
  ui.system.value = settings.system ?? '';
  ui.temperature.value = settings.temperature ?? '';
  ui.maxTokens.value = settings.maxTokens ?? '';

  ui.apiKey.addEventListener('change', () => {
    save(KEYS.apiKey, ui.apiKey.value.trim());
    loadModels();
  });
  ui.model.addEventListener('change', () => save(KEYS.model, ui.model.value));
  for (const input of [ui.system, ui.temperature, ui.maxTokens]) {
    input.addEventListener('change', () => save(KEYS.settings, {
      system: ui.system.value,
      temperature: ui.temperature.value,
      maxTokens: ui.maxTokens.value,
    }));
  }
  ui.form.addEventListener('submit', (event) => {
    event.preventDefault();
    const text = ui.input.value.trim();
    if (!text || controller) return;
    ui.input.value = '';
    send(text);
  });
  ui.input.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      ui.form.requestSubmit();
    }
  });
  ui.stop.addEventListener('click', stopReply);
  ui.newChat.addEventListener('click', newChat);
  loadModels();
}

start();
