// What the pages of `accord serve` share: requests that carry the API
// key (asked for once, kept for the tab's life) and a reader of
// server-sent events from fetch()'s body, which, unlike EventSource, can
// send the key as a Bearer header. The key dialog (#key-dialog) is made
// the first time a page needs it.

const $ = (id) => document.getElementById(id);
const KEY_ITEM = "accord-api-key"; // sessionStorage: the key lasts as long as the tab

// The dialog that asks for the key, added to the page once.
function keyDialog() {
  const made = $("key-dialog");
  if (made) return made;
  const dialog = document.createElement("dialog");
  dialog.id = "key-dialog";
  dialog.innerHTML = `<form method="dialog">
    <p>This server asks for its API key (<code>--api-key</code>).</p>
    <p id="key-refused" class="error" hidden>The server refused that key.</p>
    <input id="key" type="password" autocomplete="off" required aria-label="API key">
    <button id="key-ok" value="ok">Use the key</button>
  </form>`;
  document.body.append(dialog);
  return dialog;
}

// Asks for the API key; `refused` says the last one was wrong.
function askKey(refused) {
  const dialog = keyDialog();
  $("key-refused").hidden = !refused;
  $("key").value = "";
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve, reject) => {
    const closed = () => {
      if (dialog.returnValue === "ok") resolve($("key").value.trim());
      else reject(new Error("no API key given"));
    };
    dialog.addEventListener("close", closed, { once: true });
  });
}

// fetch() with the API key, once one was given. A 401 asks for the key
// and sends the request again.
export async function api(path, init = {}) {
  for (;;) {
    const key = sessionStorage.getItem(KEY_ITEM);
    const headers = { ...init.headers };
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(path, { ...init, headers });
    if (response.status !== 401) return response;
    sessionStorage.setItem(KEY_ITEM, await askKey(key !== null));
  }
}

// The message of an error answer (OpenAI's shape), or its status.
export async function errorText(response) {
  try {
    return (await response.json()).error.message;
  } catch {
    return `the server answered ${response.status}`;
  }
}

// Each event's data of a server-sent event stream, as it arrives.
export async function* eventData(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const lines = buffer.slice(0, end).split("\n");
      buffer = buffer.slice(end + 2);
      const data = lines.filter((line) => line.startsWith("data:")).map((line) => line.slice(5).replace(/^ /, ""));
      if (data.length > 0) yield data.join("\n");
    }
  }
}
