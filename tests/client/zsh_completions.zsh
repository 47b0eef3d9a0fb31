#!/bin/zsh -f
# zsh_completions.zsh SCRIPT LINE: the completions zsh offers at the end of LINE with the
# completion SCRIPT loaded, one per line. An interactive zsh runs under a pseudo-terminal
# (zpty), as in a person's shell; a TAB completes, and compadd, wrapped, prints each match.
zmodload zsh/zpty || exit 2
zpty z zsh -f -i
zpty -w z "PROMPT=; autoload -U compinit; compinit -u -d ${TMPDIR:-/tmp}/fp8ctl-zcompdump-$$; source ${(q)1}"
# Each match after a \x01, the end as a \x02 (characters, not the text of these lines as the
# terminal echoes them); the shell exits after completing.
zpty -w z 'compadd() { local -a h; builtin compadd -A h "$@"; print -rl -- ${h/#/$'"'"'\x01'"'"'}; builtin compadd "$@" }'
zpty -w z 'fp8_done() { print -r -- $'"'"'\x02'"'"'; exit }; comppostfuncs=( fp8_done ); bindkey "^I" complete-word'
zpty -w z "$2"$'\t'
local line
integer deadline=$((SECONDS + 20)) code=1
while (( SECONDS < deadline )); do
  if ! zpty -r -t z line; then
    sleep 0.05
    continue
  fi
  line=${${line//$'\r'/}%$'\n'}
  if [[ $line == *$'\x02'* ]]; then
    code=0
    break
  fi
  [[ $line == *$'\x01'* ]] && print -r -- ${line#*$'\x01'}
done
zpty -d z
rm -f ${TMPDIR:-/tmp}/fp8ctl-zcompdump-$$
exit $code
