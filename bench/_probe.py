import sys, torch, maskc
name, n, heads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
params = dict(kv.split("=") for kv in sys.argv[4:])
params = {k: int(v) for k, v in params.items()}
attn = maskc.load(f"examples/{name}.mask")
q, k, v, do = (torch.randn(1, n, heads, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
out, lse = attn(q, k, v, return_lse=True, **params)
g = attn.backward(q, k, v, out, lse, do, **params)
torch.cuda.synchronize(); print("ok", name, n, out.float().abs().mean().item())
