// A real MCP client (the official TypeScript SDK) for berm's tests. argv[2] is a JSON spec:
// {"stdio": {"command", "args"}} or {"http": {"url", "token"}}, and "calls": [{name, arguments, _meta?}].
// It prints one JSON object: {tools: [names], results: [CallToolResult | {error}]}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const spec = JSON.parse(process.argv[2]);
let transport;
if (spec.stdio) {
  transport = new StdioClientTransport({ command: spec.stdio.command, args: spec.stdio.args, stderr: "inherit" });
} else {
  transport = new StreamableHTTPClientTransport(new URL(spec.http.url), {
    requestInit: { headers: { Authorization: `Bearer ${spec.http.token}` } },
  });
}
const client = new Client({ name: "berm-test", version: "1.0.0" });
const out = { tools: [], results: [] };
try {
  await client.connect(transport);
  const tools = await client.listTools();
  out.tools = tools.tools.map((t) => t.name);
  for (const c of spec.calls || []) {
    try {
      const params = { name: c.name, arguments: c.arguments };
      if (c._meta) params._meta = c._meta;
      out.results.push(await client.callTool(params, undefined, { timeout: 120000 }));
    } catch (e) {
      out.results.push({ error: String(e) });
    }
  }
} catch (e) {
  out.connectError = String(e);
}
console.log(JSON.stringify(out));
await client.close().catch(() => {});
process.exit(0);
