package engine

import "fmt"

// Per-user and per-account limits (SiteConfig.Limits) are checked when a
// job is considered, before quota: a job that would take its user or
// account over a limit waits with ReasonLimit, and PendingStatus.Limit
// names the limit. Usage counts the running and stopping jobs (charged at
// activate, released at deactivate), so jobs bound earlier in the same
// cycle count.

func (st *siteState) user(name string) *usage {
	if st.users == nil {
		st.users = map[string]*usage{}
	}
	u := st.users[name]
	if u == nil {
		u = &usage{}
		st.users[name] = u
	}
	return u
}

func (st *siteState) account(name string) *usage {
	if st.accounts == nil {
		st.accounts = map[string]*usage{}
	}
	u := st.accounts[name]
	if u == nil {
		u = &usage{}
		st.accounts[name] = u
	}
	return u
}

// accountGPUs is the GPU limit of an account (0: none).
func (l *Limits) accountGPUs(a string) int {
	if n, ok := l.Accounts[a]; ok {
		return n
	}
	return l.MaxGPUsPerAccount
}

// limitWait reports the limit js would pass by starting now, if any.
func (e *Engine) limitWait(js *job) (string, bool) {
	st := e.site
	l := &st.cfg.Limits
	j := js.j
	if j.User != "" && (l.MaxJobsPerUser > 0 || l.MaxGPUsPerUser > 0) {
		var u usage
		if p := st.users[j.User]; p != nil {
			u = *p
		}
		if l.MaxJobsPerUser > 0 && u.jobs+1 > l.MaxJobsPerUser {
			return fmt.Sprintf("MaxJobsPerUser: user %s runs %d of %d jobs", j.User, u.jobs, l.MaxJobsPerUser), true
		}
		if l.MaxGPUsPerUser > 0 && u.gpus+js.gpuN > l.MaxGPUsPerUser {
			return fmt.Sprintf("MaxTRESPerUser: user %s holds %d of %d GPUs, needs %d", j.User, u.gpus, l.MaxGPUsPerUser, js.gpuN), true
		}
	}
	a := j.AccountName()
	if max := l.accountGPUs(a); max > 0 {
		var u usage
		if p := st.accounts[a]; p != nil {
			u = *p
		}
		if u.gpus+js.gpuN > max {
			return fmt.Sprintf("GrpTRES: account %s holds %d of %d GPUs, needs %d", a, u.gpus, max, js.gpuN), true
		}
	}
	return "", false
}
