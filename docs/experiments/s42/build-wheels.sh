#!/usr/bin/env bash
# The forty-second session's paired builds into .whl/ from a clean checkout of main (run from the repository root):
# main, and main with docs/experiments/s42/bwd-paired-consumer-add.patch (the fortieth session's plain-causal
# prototype plus two switches for how a dQ share moves), its Jinja switch paired_prototype on, as
#   pd:  the prototype (the writer warp adds the received share; the sender st.asyncs 16 bytes a thread)
#   pdb: the writer adds; the sender stages its share and copies it by one bulk copy
#   pa:  the receiving consumer adds the share into its accumulators; st.async sends
#   pb:  the receiving consumer adds; one bulk copy sends
#   pbr: pb with Q and dO multicast (the whole paired kernel)
#   pf:  the receiving consumer stages its share into sdQ's half step % 2 and adds the partner's share at the start
#        of the next step (ADD_AT 2); st.async sends
#   pfr: pf with Q and dO multicast
#   pn:  TIMING ONLY (dQ wrong): the writer waits for the partner's share and adds nothing (ADD_AT 3); st.async
#        sends. What the exchange's traffic and the writer's lockstep cost with no add and no consumer waiting.
# and lark and click into .whl/deps. The tree is left as it was.
source docs/experiments/wheel-builds.sh
T=templates/sm90a/attention_bwd.cu.j2 F=maskc/kernels/family.py
wheel main
git apply docs/experiments/s42/bwd-paired-consumer-add.patch
sed -i 's/^PAIRED_PROTOTYPE_BYTES = 0  # 16 + 16 + 16384/PAIRED_PROTOTYPE_BYTES = 16 + 16 + 16384/' $F
cp $T /tmp/pair_template.j2
for v in "pd 0 0 0" "pdb 0 0 1" "pa 0 1 0" "pb 0 1 1" "pbr 1 1 1" "pf 0 2 0" "pfr 1 2 0" "pn 0 3 0"; do
  set -- $v
  sed "s/^{% set paired_prototype = false %}$/{% set paired_prototype = true %}/; s/^#define MASKC_PAIRED_Q 1$/#define MASKC_PAIRED_Q $2/;
       s/^#define MASKC_PAIRED_ADD_AT 1$/#define MASKC_PAIRED_ADD_AT $3/; s/^#define MASKC_PAIRED_SEND 1$/#define MASKC_PAIRED_SEND $4/" \
    /tmp/pair_template.j2 > $T
  grep -q "^#define MASKC_PAIRED_SEND $4$" $T && grep -q "^#define MASKC_PAIRED_ADD_AT $3$" $T || { echo "sed missed in $1"; exit 1; }
  wheel $1
done
