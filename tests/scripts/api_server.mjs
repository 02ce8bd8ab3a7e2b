// Starts `strata serve` on a free port for the API script tests and stops it with SIGTERM
// (the stop must be graceful: exit code 0 within the grace period).
import { spawn } from "node:child_process";

export async function startServer(bin, model, extra = []) {
  const args = ["serve", "--config", `${process.env.STRATA_SOURCE_DIR}/configs/tiny-cpu.yaml`,
                "--model", model, "--port", "0", "--set", "server.shutdown_grace_s=3", ...extra];
  const proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stderr.on("data", (d) => process.stderr.write(d));
  const info = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + out)), 60000);
    proc.on("exit", (code) => reject(new Error(`server exited with ${code}:\n${out}`)));
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/admin:\s+(http:\/\/[^/]+)\/admin\?token=(\w+)/);
      if (m && out.includes("ready")) { clearTimeout(timer); resolve({ base: m[1], token: m[2] }); }
    });
  });
  proc.removeAllListeners("exit");
  return {
    ...info, proc,
    async stop() {
      const code = await new Promise((resolve) => { proc.on("exit", (c, s) => resolve(c ?? s)); proc.kill("SIGTERM"); });
      if (code !== 0) throw new Error(`server exit after SIGTERM: ${code}`);
    },
  };
}

export function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
  console.log("ok -", what);
}

export async function pagesUsed(s) {
  const r = await fetch(`${s.base}/admin/api/stats`, { headers: { Authorization: `Bearer ${s.token}` } });
  return (await r.json()).pages_used;
}

export async function waitPagesFree(s, ms = 5000) {
  const until = Date.now() + ms;
  let used = -1;
  while (Date.now() < until) {
    used = await pagesUsed(s);
    if (used === 0) return 0;
    await new Promise((r) => setTimeout(r, 100));
  }
  return used;
}
