package replica

import (
	"fmt"
	"log/slog"
)

// raftLogger adapts slog to raft.Logger. Raft's info messages (elections,
// term changes) are frequent with many shards, so they go to debug level.
type raftLogger struct{ l *slog.Logger }

func newRaftLogger(l *slog.Logger) *raftLogger {
	if l == nil {
		l = slog.Default()
	}
	return &raftLogger{l: l}
}

func (r *raftLogger) Debug(v ...interface{})                 { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Debugf(format string, v ...interface{}) { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Info(v ...interface{})                  { r.l.Debug(fmt.Sprint(v...)) }
func (r *raftLogger) Infof(format string, v ...interface{})  { r.l.Debug(fmt.Sprintf(format, v...)) }
func (r *raftLogger) Warning(v ...interface{})               { r.l.Warn(fmt.Sprint(v...)) }
func (r *raftLogger) Warningf(format string, v ...interface{}) {
	r.l.Warn(fmt.Sprintf(format, v...))
}
func (r *raftLogger) Error(v ...interface{})                 { r.l.Error(fmt.Sprint(v...)) }
func (r *raftLogger) Errorf(format string, v ...interface{}) { r.l.Error(fmt.Sprintf(format, v...)) }

// Fatal and Fatalf panic rather than exit: replica owns no process-level
// effects (internal/lint), and a panic on the loop goroutine ends the
// process just as surely, with a stack trace.
func (r *raftLogger) Fatal(v ...interface{}) {
	r.l.Error(fmt.Sprint(v...))
	panic(fmt.Sprint(v...))
}
func (r *raftLogger) Fatalf(format string, v ...interface{}) {
	r.l.Error(fmt.Sprintf(format, v...))
	panic(fmt.Sprintf(format, v...))
}
func (r *raftLogger) Panic(v ...interface{})                 { panic(fmt.Sprint(v...)) }
func (r *raftLogger) Panicf(format string, v ...interface{}) { panic(fmt.Sprintf(format, v...)) }
