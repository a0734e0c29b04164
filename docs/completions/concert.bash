_concert() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="concert"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        concert)
            opts="-h --cap --max-queue --max-queue-per-ip --token-ttl --first-poll-grace --ready-grace --reaper --retry-after --api-json --html --fastlane-config --networks-config --fastlane-entry-ttl --rate --surge --skip-url --pass --priority-cap --priority-lane-rank --priority-wait --priority-forms --listen --upstream --upstream-timeout --max-body --upload-timeout --upload-disk-limit --preserve-host --trusted-proxies --access-log --secure-cookie --cookie-path --cookie-domain --bypass --ban-paths --unbuffered-upload-paths --assets --asset-public --asset-cap --asset-wait --asset-user-cap-h1 --asset-user-cap-h2 --asset-user-wait --admit-ttl --client-proto-header --stream-paths --stream-cap --abuse --abuse-strikes --abuse-window --abuse-cooldown --abuse-max-cooldown --abuse-max-entries --abuse-allow --tls-cert --tls-key --tls-domains --tls-email --tls-cache --tls-staging --tls-directory --tls-directory-ca --http-listen --hsts --portal-listen --portal-allow --portal-session-ttl --portal-secure-cookie --portal-tls-cert --portal-tls-key --history-log --cluster --cluster-name --cluster-fallback-share --data-dir --demo --log-format --workers --metrics-path --version --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --cap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-queue)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-queue-per-ip)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --token-ttl)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --first-poll-grace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ready-grace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --reaper)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --retry-after)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --api-json)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --html)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fastlane-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --networks-config)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --fastlane-entry-ttl)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --rate)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --surge)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --skip-url)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pass)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --priority-cap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --priority-lane-rank)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --priority-wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --priority-forms)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --upstream)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --upstream-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --max-body)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --upload-timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --upload-disk-limit)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --preserve-host)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --trusted-proxies)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --access-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --secure-cookie)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cookie-path)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cookie-domain)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --bypass)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --ban-paths)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --unbuffered-upload-paths)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --assets)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --asset-public)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --asset-cap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --asset-wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --asset-user-cap-h1)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --asset-user-cap-h2)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --asset-user-wait)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --admit-ttl)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --client-proto-header)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stream-paths)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stream-cap)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --abuse)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --abuse-strikes)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --abuse-window)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --abuse-cooldown)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --abuse-max-cooldown)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --abuse-max-entries)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --abuse-allow)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-domains)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-email)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-cache)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-staging)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-directory)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tls-directory-ca)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --http-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --hsts)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal-listen)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal-allow)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal-session-ttl)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal-secure-cookie)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal-tls-cert)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --portal-tls-key)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --history-log)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-name)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cluster-fallback-share)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --data-dir)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --demo)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --log-format)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --workers)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --metrics-path)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --version)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _concert -o nosort -o bashdefault -o default concert
else
    complete -F _concert -o bashdefault -o default concert
fi
