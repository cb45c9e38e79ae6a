// What the page of tests/web/index.html runs (bundled with zarrita into app.js):
// opens the Zarr v2 store at ?store=URL through its consolidated metadata, reads
// each array of ?arrays=PATH,PATH (PATH[a:b] reads rows a to b of the first axis
// only), the attributes of the root and of X, and one suffix Range of ?range=KEY
// (a request with a Range header: a CORS preflight), then writes it all as JSON
// into #result. window.zarrmountDone is that JSON, once written.
import * as zarr from "zarrita";

// JSON has no NaN, infinities, -0 or 64-bit integers: those are strings.
function encode(value) {
  if (typeof value === "bigint") return value.toString();
  if (typeof value !== "number") return value;
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "Infinity";
  if (value === -Infinity) return "-Infinity";
  if (Object.is(value, -0)) return "-0";
  return value;
}

async function read(query) {
  const base = new URL(query.get("store"), location.href).href;
  const store = await zarr.withConsolidatedMetadata(new zarr.FetchStore(base), { format: "v2" });
  const root = zarr.root(store);
  const group = await zarr.open.v2(root, { kind: "group" });
  const x = await zarr.open.v2(root.resolve("X"), { kind: "group" });
  const result = { attrs: { "/": group.attrs, X: x.attrs }, arrays: {} };
  for (const spec of query.get("arrays").split(",")) {
    const [, path, start, stop] = spec.match(/^([^[]+)(?:\[(\d+):(\d+)\])?$/);
    const array = await zarr.open.v2(root.resolve(path), { kind: "array" });
    const selection = start === undefined ? null
      : [zarr.slice(Number(start), Number(stop)), ...array.shape.slice(1).map(() => null)];
    const chunk = await zarr.get(array, selection);
    result.arrays[spec] = {
      dtype: array.dtype,
      shape: chunk.shape,
      codecs: array.codecs ?? null,
      values: Array.from(chunk.data, encode),
    };
  }
  const key = query.get("range");
  if (key) {
    const response = await fetch(new URL(key, base), { headers: { Range: "bytes=-16" } });
    result.range = {
      status: response.status,
      contentRange: response.headers.get("Content-Range"),
      bytes: Array.from(new Uint8Array(await response.arrayBuffer())),
    };
  }
  // Every URL the page fetched (the test checks they are all its nginx's).
  result.resources = performance.getEntriesByType("resource").map((entry) => entry.name);
  return result;
}

window.zarrmountDone = read(new URLSearchParams(location.search))
  .catch((error) => ({
    error: `${error.name}: ${error.message}${error.cause ? ` (${error.cause})` : ""}`,
  }))
  .then((result) => {
    const text = JSON.stringify(result);
    document.getElementById("result").textContent = text;
    return text;
  });
