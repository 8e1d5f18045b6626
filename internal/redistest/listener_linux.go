package redistest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// listensOn reports whether process pid holds the listening TCP socket on 127.0.0.1:port: the
// socket's inode from /proc/net/tcp, among the process's open files. A server whose port was
// taken between freePort and its own bind exits, but a probe sent before it did may have been
// answered by the port's other owner, another test's server.
func listensOn(pid, port int) (bool, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return false, err
	}
	defer f.Close()
	local := fmt.Sprintf("0100007F:%04X", port) // 127.0.0.1, as the kernel prints it
	inode := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && fields[1] == local && fields[3] == "0A" { // 0A: LISTEN
			inode = fields[9]
			break
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if inode == "" {
		return false, nil
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, fd := range fds {
		if link, err := os.Readlink(dir + "/" + fd.Name()); err == nil && link == "socket:["+inode+"]" {
			return true, nil
		}
	}
	return false, nil
}
