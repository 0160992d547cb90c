package credentials

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	goodID     = "AKIAIOSFODNN7EXAMPLE"
	goodSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

func TestFromSecrets(t *testing.T) {
	tests := []struct {
		name    string
		secrets map[string]string
		want    Credentials
		wantErr error
		wantMsg string
	}{
		{name: "valid", secrets: map[string]string{KeyAccessKeyID: goodID, KeySecretAccessKey: goodSecret}, want: Credentials{AccessKeyID: goodID, SecretAccessKey: goodSecret}},
		{name: "with token", secrets: map[string]string{KeyAccessKeyID: goodID, KeySecretAccessKey: goodSecret, KeySessionToken: "FwoG%2Fabc=="}, want: Credentials{AccessKeyID: goodID, SecretAccessKey: goodSecret, SessionToken: "FwoG%2Fabc=="}},
		{name: "empty secret", secrets: nil, wantErr: ErrMissing, wantMsg: "empty"},
		{name: "no key id", secrets: map[string]string{KeySecretAccessKey: goodSecret}, wantErr: ErrMissing, wantMsg: KeyAccessKeyID},
		{name: "no secret", secrets: map[string]string{KeyAccessKeyID: goodID}, wantErr: ErrMissing, wantMsg: KeySecretAccessKey},
		{name: "empty key id", secrets: map[string]string{KeyAccessKeyID: "", KeySecretAccessKey: goodSecret}, wantErr: ErrInvalid, wantMsg: KeyAccessKeyID + " is empty"},
		{name: "newline in key id", secrets: map[string]string{KeyAccessKeyID: "AKIA\n[profile x]", KeySecretAccessKey: goodSecret}, wantErr: ErrInvalid, wantMsg: KeyAccessKeyID + " contains"},
		{name: "space in secret", secrets: map[string]string{KeyAccessKeyID: goodID, KeySecretAccessKey: "a b"}, wantErr: ErrInvalid, wantMsg: KeySecretAccessKey + " contains"},
		{name: "non utf8 secret", secrets: map[string]string{KeyAccessKeyID: goodID, KeySecretAccessKey: "\xff\xfe"}, wantErr: ErrInvalid, wantMsg: KeySecretAccessKey + " is not valid UTF-8"},
		{name: "oversized key id", secrets: map[string]string{KeyAccessKeyID: strings.Repeat("A", 129), KeySecretAccessKey: goodSecret}, wantErr: ErrInvalid, wantMsg: "longer than 128"},
		{name: "oversized token", secrets: map[string]string{KeyAccessKeyID: goodID, KeySecretAccessKey: goodSecret, KeySessionToken: strings.Repeat("A", 8193)}, wantErr: ErrInvalid, wantMsg: KeySessionToken + " is longer"},
		{name: "empty token given", secrets: map[string]string{KeyAccessKeyID: goodID, KeySecretAccessKey: goodSecret, KeySessionToken: ""}, wantErr: ErrInvalid, wantMsg: KeySessionToken + " is empty"},
		{name: "unknown key", secrets: map[string]string{KeyAccessKeyID: goodID, KeySecretAccessKey: goodSecret, "secret_key": "x"}, wantErr: ErrInvalid, wantMsg: `1 key(s) the driver does not accept (of 3); accepted keys: ["access_key_id" "secret_access_key" "session_token"]`},
		{name: "value pasted as a key name", secrets: map[string]string{KeyAccessKeyID: goodID, KeySecretAccessKey: goodSecret, "wJalrXUtnFEMI/K7MDENG": "", "AKIA_PASTED": "x"}, wantErr: ErrInvalid, wantMsg: "2 key(s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromSecrets(tc.secrets)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.wantErr, tc.wantMsg)
				}
				for k, v := range tc.secrets {
					if len(v) > 3 && strings.Contains(err.Error(), v) {
						t.Fatalf("error %q leaks a secret value", err)
					}
					if !slices.Contains([]string{KeyAccessKeyID, KeySecretAccessKey, KeySessionToken}, k) && strings.Contains(err.Error(), k) {
						t.Fatalf("error %q names an unknown key (%q): users paste values into key names", err, k)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	driver := &Credentials{AccessKeyID: goodID, SecretAccessKey: goodSecret}
	secrets := map[string]string{KeyAccessKeyID: "OTHERKEY", KeySecretAccessKey: "othersecret", "region": "eu"}

	c, src, err := Resolve("", nil, driver, false)
	if err != nil || c != driver || src != SourceDriver {
		t.Errorf("default source: %v %v %v", c, src, err)
	}
	c, src, err = Resolve("secret", secrets, driver, false)
	if err != nil || c.AccessKeyID != "OTHERKEY" || src != SourceSecret {
		t.Errorf("secret source: %v %v %v", c, src, err)
	}
	if _, _, err = Resolve("secret", nil, driver, false); !errors.Is(err, ErrMissing) {
		t.Errorf("secret source without secrets: err = %v, want ErrMissing (no fallback to the driver)", err)
	}
	if _, _, err = Resolve("driver", nil, nil, false); !errors.Is(err, ErrNoDriverCredentials) {
		t.Errorf("driver source without driver creds: err = %v, want ErrNoDriverCredentials", err)
	}
	if c, _, err = Resolve("driver", nil, nil, true); err != nil || c != nil {
		t.Errorf("anonymous: %v %v", c, err)
	}
	if _, _, err = Resolve("pod", nil, driver, false); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "authenticationSource") {
		t.Errorf("unknown source: err = %v", err)
	}
}

func TestFormattingRedacts(t *testing.T) {
	c := Credentials{AccessKeyID: goodID, SecretAccessKey: goodSecret, SessionToken: "tok123456"}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{c, &c, struct{ C Credentials }{c}} {
			out := fmt.Sprintf(format, v)
			for _, secret := range []string{goodID, goodSecret, "tok123456"} {
				if strings.Contains(out, secret) {
					t.Errorf("fmt %s of %T leaks %q: %s", format, v, secret, out)
				}
			}
		}
	}
}

func TestWriteProfile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mount")
	env, err := WriteProfile(dir, "/env/view", Credentials{AccessKeyID: goodID, SecretAccessKey: goodSecret, SessionToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := []string{"AWS_PROFILE=s3-csi", "AWS_CONFIG_FILE=/env/view/config", "AWS_SHARED_CREDENTIALS_FILE=/env/view/credentials"}
	if diff := cmp.Diff(wantEnv, env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode = %v, %v; want 0700", st.Mode(), err)
	}
	for name, want := range map[string]string{
		ConfigFileName:      "[profile s3-csi]\n",
		CredentialsFileName: "[s3-csi]\naws_access_key_id = " + goodID + "\naws_secret_access_key = " + goodSecret + "\naws_session_token = tok\n",
	} {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("%s = %q, want %q", name, b, want)
		}
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", name, st.Mode())
		}
	}
	// Refresh replaces the content and leaves no temporary files.
	if _, err := WriteProfile(dir, dir, Credentials{AccessKeyID: "NEWKEY", SecretAccessKey: "newsecret"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, CredentialsFileName))
	if !strings.Contains(string(b), "NEWKEY") || strings.Contains(string(b), "aws_session_token") {
		t.Errorf("refreshed credentials = %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir has %d entries, want 2 (no temp files)", len(entries))
	}
	if err := RemoveProfile(dir); err != nil {
		t.Fatal(err)
	}
	if err := RemoveProfile(dir); err != nil {
		t.Errorf("second RemoveProfile: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left after RemoveProfile: %v", entries)
	}
	// Invalid credentials write nothing.
	empty := filepath.Join(t.TempDir(), "x")
	if _, err := WriteProfile(empty, empty, Credentials{AccessKeyID: "bad\nid", SecretAccessKey: "s"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("invalid credentials created %s", empty)
	}
}

func TestWriteProfileForGroup(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "credentials")
	if _, err := WriteProfileForGroup(dir, "/comm/credentials", Credentials{AccessKeyID: goodID, SecretAccessKey: goodSecret}, 1000); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o750 | os.ModeDir, filepath.Join(dir, ConfigFileName): 0o640, filepath.Join(dir, CredentialsFileName): 0o640} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("%s mode = %v, want %v", p, st.Mode(), want)
		}
		if gid := st.Sys().(*syscall.Stat_t).Gid; gid != 1000 {
			t.Errorf("%s gid = %d, want 1000", p, gid)
		}
	}
}

// TestWriteFile: a file written beside the profile gets the same modes and group, root only
// without a group, and a link at the directory's name is not followed.
func TestWriteFile(t *testing.T) {
	base := t.TempDir()
	for _, tc := range []struct {
		gid              int
		dirMode, pemMode os.FileMode
		wantGID          uint32
	}{
		{gid: 1000, dirMode: 0o750, pemMode: 0o640, wantGID: 1000},
		{gid: -1, dirMode: 0o700, pemMode: 0o600, wantGID: 0},
	} {
		dir := filepath.Join(base, fmt.Sprint("m", tc.gid))
		p, err := WriteFile(dir, "ca.pem", []byte("pem"), tc.gid)
		if err != nil {
			t.Fatal(err)
		}
		if p != filepath.Join(dir, "ca.pem") {
			t.Errorf("path = %s", p)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != "pem" {
			t.Errorf("content = %q, %v", b, err)
		}
		for path, want := range map[string]os.FileMode{dir: tc.dirMode | os.ModeDir, p: tc.pemMode} {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode() != want {
				t.Errorf("gid %d: %s mode = %v, want %v", tc.gid, path, st.Mode(), want)
			}
			if os.Geteuid() == 0 && st.Sys().(*syscall.Stat_t).Gid != tc.wantGID {
				t.Errorf("gid %d: %s gid = %d", tc.gid, path, st.Sys().(*syscall.Stat_t).Gid)
			}
		}
	}
	elsewhere := t.TempDir()
	link := filepath.Join(base, "link")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteFile(link, "ca.pem", []byte("pem"), 1000); err == nil {
		t.Error("WriteFile followed a link at the directory's name")
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "ca.pem")); !os.IsNotExist(err) {
		t.Errorf("a file was written through the link: %v", err)
	}
}
